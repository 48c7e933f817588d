"""The SQS- and SNS-compatible endpoint.

- ``endpoint``: ``POST /`` as AWS SDKs call it: the protocol, the action, the answer;
- ``queues``, ``messages``, ``moves``, ``topics``: one function per action;
- ``call``: what an action is given; ``params``, ``attributes``, ``receipts``,
  ``digests``, ``query`` and ``errors``: the wire forms of its parameters and answers.
"""
