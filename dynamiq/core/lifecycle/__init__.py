"""A message's life after its publish.

- ``life``: receive counts, dead letters and retry backoff, as messages are
  delivered and their leases lapse;
- ``expiry``: retention and time to live, enforced in the background;
- ``redrive``: a dead-letter queue's messages moved back;
- ``idle``: queues deleted after nobody used them for a while.
"""
