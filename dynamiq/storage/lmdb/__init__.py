"""The embedded store on LMDB (``LmdbBackend``): the storage port with no server to run,
fsync before every acknowledgement.

- ``backend``: the port's methods, reads on the caller's thread, writes handed to a writer;
- ``ops``: every write as a function of a write transaction and plain data;
- ``writer``: the one writer thread, group commit, the map's growth, room on the disk;
- ``server``, ``remote``, ``wire``: the writer as a process of its own for every worker
  of a node (``storage.writer = process``), the workers' link to it, their frames;
- ``backup``: a compacted copy while the node serves (``dynamiq backup``).
"""

from dynamiq.storage.lmdb.backend import LmdbBackend

__all__ = ["LmdbBackend"]
