"""What of the Riak adapter runs without a Riak node: siblings, failures, configuration."""

from __future__ import annotations

import pytest

from dynamiq.config import load_settings
from dynamiq.errors import BackendUnavailable, ConfigError
from dynamiq.storage.riak import RiakBackend, _siblings
from tests.servers import free_port


def test_siblings_are_read_from_a_multipart_answer() -> None:
    body = (
        b"\r\n--XX\r\nContent-Type: application/octet-stream\r\nEtag: 1\r\n\r\nrecord\r\n"
        b"--XX\r\nContent-Type: application/octet-stream\r\nX-Riak-Deleted: true\r\n"
        b"Etag: 2\r\n\r\n\r\n--XX--\r\n"
    )
    assert _siblings("multipart/mixed; boundary=XX", body) == [(False, b"record"), (True, b"")]


async def test_no_reachable_node_is_a_503_not_a_crash() -> None:
    dead = [f"http://127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    store = RiakBackend([d if d.startswith("http") else f"http://{d}" for d in dead])
    try:
        with pytest.raises(BackendUnavailable, match="no Riak node answered"):
            await store.get("q", [1])
        with pytest.raises(BackendUnavailable):
            await store.meta_scan("")
    finally:
        await store.close()
        await store.close()


def test_the_riak_backend_needs_nodes() -> None:
    with pytest.raises(ConfigError, match=r"core\.riaknodes"):
        load_settings(env={"DYNAMIQ_STORAGE_BACKEND": "riak"})
    s = load_settings(
        env={"DYNAMIQ_STORAGE_BACKEND": "riak", "DYNAMIQ_CORE_RIAKNODES": "a:8098, http://b:8098"}
    )
    assert s.core.riak_nodes() == ["http://a:8098", "http://b:8098"]
    with pytest.raises(ConfigError, match="not host:port"):
        load_settings(env={"DYNAMIQ_CORE_RIAKNODES": "nohost"})
