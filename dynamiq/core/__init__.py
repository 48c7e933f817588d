"""The queue engine: what a node does with messages, whatever the API or the store.

The faces, which the application layer calls:

- ``queues.QueueService``: publish, receive under leases, delete, peek, stats;
- ``topics.TopicService``: fan a topic's message out to its subscribed queues;
- ``janitor.Janitor`` and ``reporter.Reporter``: background upkeep and metrics.

The rooms behind them, each a package that imports only the ones below it:

- ``lifecycle``: a message's life after its publish: receive counts, dead
  letters, backoff, expiry and retention, redrive, idle queues' deletion;
- ``publish``: what a publish stores and the one path that stores it (fresh
  ids, inserted plain or with a dedup claim, expiry hints), bounds on depth;
- ``custody``: leases across nodes: the lease journal, handover and takeover;
- ``delivery``: a queue's in-memory side on one node: partitions, the
  oldest-first walk, the lease table, ordered groups, rates;
- ``context``: the store, the catalog and the clock every part stands on;
- ``catalog``: queues, topics and subscriptions, kept in the store;
- ``routing``: subscriptions' patterns and filter policies, SNS notifications;
- ``records``, ``ids``, ``clock``: a message's stored form, ids and the
  keyspace, time.
"""
