"""The node's process: what ``dynamiq serve`` runs, from the top down.

- ``supervisor``: a node served by several worker processes (``core.workers``);
- ``daemon``: one process's sockets, signals and tuning, serving until told to stop;
- ``wiring``: the composition root, ``create_app``: the ground, the node built on
  it, and the parts run with the app;
- ``parts``: what the node runs, one part each (the store, the catalog, the
  cluster, upkeep, the front end, push delivery), in the order they start;
- ``node``: the engine, the cluster parts, push delivery and reporting, built;
- ``ground``: what every part stands on (the store, the metrics, the cluster's
  reach, the keys);
- ``seat``, ``contexts``, ``tls``: where a process sits in the cluster, the
  cleanup contexts parts are made of, TLS contexts.
"""
