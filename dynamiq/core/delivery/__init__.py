"""Delivery: a queue's in-memory side on one node, and the walk that leases messages.

- ``state``: per queue, its partitions, cursors, leases, groups and rates;
- ``partitions`` and ``cursor``: the least-recently-used partition and its
  oldest-first walk;
- ``leases``: which messages are invisible, and until when;
- ``groups``: ordered groups, delivered in order;
- ``walks``: receives in flight, by the slice they started under;
- ``census`` and ``rates``: what a queue holds beyond its count, and its rates.
"""
