"""Custody of leases across nodes.

- ``journal``: the leases a node hands out, and receive counts not stored yet;
- ``handover``: leases handed over, taken over, kept through a pause, replayed.
"""
