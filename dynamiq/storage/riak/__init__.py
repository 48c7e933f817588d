"""Riak KV adapter over its HTTP API (aiohttp), in the original Dynamiq's layout.

Layout (bucket types are created with ``riak-admin``, see ``setup.sh --riak``):

- Messages: bucket type ``messages``, one bucket per queue incarnation, the
  id as the key and as the 2i integer index ``id_int``; range scans are
  paginated 2i queries with ``max_results`` (sorted pages). Writes ask for
  ``w=quorum&dw=quorum`` (a quorum of vnodes wrote it durably) and never
  overwrite (``If-None-Match: *``).
- Configuration: bucket type ``maps`` (datatype map), bucket ``config``: one
  map whose registers are the ``meta`` keys (values base64). Concurrent
  updates merge as the CRDT says; a conditional create is a read then an
  update with its causal context, so two nodes creating the same name at
  the same instant may both succeed (last writer wins).
- Depth: a counter per bucket in the map ``counts/<bucket>`` (type ``maps``),
  moved by the writes of a batch that succeeded, even when the batch as a
  whole failed (``depths``).

Siblings are resolved, never re-enqueued: a message with a deleted sibling is
gone (the delete wins), otherwise any sibling (they hold the same record).
Several nodes (``core.riaknodes``) are tried in turn; when none answers,
``BackendUnavailable`` (``http``).

Tested against Riak KV 3.2 only where ``DYNAMIQ_RIAK_URL`` names a node; 2i
needs the leveled, leveldb or memory backend.
"""

from dynamiq.storage.riak.backend import RiakBackend
from dynamiq.storage.riak.http import HttpTransport, RiakRequest, Transport

__all__ = ["HttpTransport", "RiakBackend", "RiakRequest", "Transport"]
