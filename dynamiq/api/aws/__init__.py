"""The SQS- and SNS-compatible endpoint.

- ``endpoint``: ``POST /`` as AWS SDKs call it: the protocol, the action, the answer;
- ``queues``, ``messages``, ``moves``, ``topics``: one function per action;
- ``door``: who signed a request (SigV4); ``grants``: what the caller may do there;
  ``accounts``: the applications' accounts in ARNs and URLs;
- ``call``: what an action is given; ``params``, ``attributes``, ``receipts``,
  ``digests``, ``query`` and ``errors``: the wire forms of its parameters and answers.
"""
