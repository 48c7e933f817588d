"""Publishing: what each message stores, and the one path that stores it.

- ``outgoing``: a publish's rows (record, due time, expiry) and their stripes;
- ``dedup``: what a message claims, so a repeat within the window is not stored;
- ``insert``: the path a publish takes: fresh ids, inserted plain or with claims;
- ``attempts``: a key drawn again where it is taken, a bounded number of times;
- ``hints``: the expiry index's entries for messages with a time to live;
- ``capacity``: a queue's ``max_depth``, checked before anything is stored.
"""
