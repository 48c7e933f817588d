"""Fair queues: a tenant holding more than its share in flight waits (pure).

SQS's fair queues (2025) name a standard queue's tenants by ``MessageGroupId``
and, when one tenant holds a disproportionate share of the messages in
flight, serve the others' messages first; nothing is ordered, nothing is
dropped, and the noisy tenant is served whenever nobody else has a message
waiting. A tenant's messages share one stripe of the publishing node's slice
(``outgoing.draw``), so a node sees what a tenant holds in flight in its
lease table's count per stripe, and a walk passes a stripe by through its
rank (``PartitionCursor.take``). AWS's thresholds: a tenant is noisy when
it holds more than 10% of the queue's messages in flight and at least 30.
When several are, the one with the fewest in flight is served first.

What a stripe holds is a tenant and whatever else hashed or was drawn
there: another tenant sharing the noisy one's stripe waits with it, one in
as many stripes as the node's slice has (256 on one node).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["NOISY_MIN", "NOISY_SHARE", "ranks"]

NOISY_SHARE = 0.10  # of the queue's messages in flight on this node
NOISY_MIN = 30  # messages in flight, at least


def ranks(in_flight: Mapping[int, int], total: int) -> dict[int, int]:
    """Rank the noisy stripes, from ``in_flight`` (per stripe) of ``total``: 1 for the
    one with the fewest in flight, and up; a stripe not named is not noisy (0)."""
    if total < NOISY_MIN:
        return {}
    share = NOISY_SHARE * total
    noisy = sorted((n, s) for s, n in in_flight.items() if n >= NOISY_MIN and n > share)
    return {stripe: rank for rank, (_, stripe) in enumerate(noisy, 1)}
