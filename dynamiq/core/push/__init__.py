"""Push subscriptions in the engine (pure), for ``service.push``.

- ``documents``: a push subscription's own queue, and SNS's documents as they are
  stored and POSTed;
- ``signing``: the cluster's signing key, its certificate, SNS's signatures.
"""
