"""The local cluster's ports: every node's, and every worker's, its own."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from dynamiq.testing import cluster as local


def test_nodes_with_workers_get_ports_no_other_node_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a narrow range to draw from: 8 nodes of 2 workers (a gossip and a peer
    # port each, and an HTTP port) would surely meet if drawn independently
    monkeypatch.setattr(local, "SPARE_PORTS", (10000, 10200))
    cluster = local.LocalCluster(tmp_path, 8, workers=2, http_ports=[10100])
    # When its nodes are defined (none started: no port is bound yet)
    used: list[int] = []
    for node in cluster.nodes.values():
        used += [node.http_port, *range(node.gossip_port, node.gossip_port + 4)]
    # Then no two nodes were handed the same port, the given HTTP port included
    assert 0 not in used and len(used) == len(set(used)) == 8 * 5


def test_a_node_whose_drawn_port_was_taken_meanwhile_draws_again(tmp_path: Path) -> None:
    # Given a node defined (its gossip port drawn), then that port taken by another process
    cluster = local.LocalCluster(tmp_path, 1)
    node = cluster.nodes["n1"]
    taken = node.gossip_port
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
        squatter.bind((local.HOST, taken))
        try:
            # When it starts, it serves all the same, on other ports
            cluster.start()
            assert node.alive() and node.gossip_port != taken
            assert "is taken" in node.log_path.read_text()  # the first try said why it failed
        finally:
            cluster.stop()
