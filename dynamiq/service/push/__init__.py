"""Push subscriptions (webhooks) in the application layer, for ``api.v2.webhooks`` and
``api.aws.push``.

- ``webhooks``: a push subscription made, confirmed, changed and removed;
- ``pusher``: each process's deliveries of its own slice: a lease per attempt, the
  retry the delivery policy (``push.policy``) schedules, dead letters.
"""
