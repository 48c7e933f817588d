"""Settings from defaults, a gcfg file, the environment and flags; one clear line on error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dynamiq.config.sources import load_settings
from dynamiq.errors import ConfigError

SECRET = "a-cluster-secret-of-thirty-two-bytes-or-more"

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_need_no_file() -> None:
    s = load_settings(env={})
    assert (s.core.httpport, s.storage.backend, s.storage.path) == (8081, "lmdb", "./data")
    assert s.core.syncconfiginterval == 2000 and s.stats.type == "none"


def test_the_sample_file_holds_the_defaults() -> None:
    assert load_settings(ROOT / "config" / "dynamiq.gcfg", env={}) == load_settings(env={})


def test_file_then_env_then_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "d.gcfg"
    cfg.write_text(
        '[core]\nname = "from file" ; comment\nhttpport = 9000\n'
        "[storage]\npath = /tmp/file # comment\nmapsize = 2GiB\n"
    )
    s = load_settings(
        cfg,
        env={"DYNAMIQ_CORE_HTTPPORT": "9001", "DYNAMIQ_STORAGE_PATH": "/e"},
        flags={"storage.path": "/flag"},
    )
    assert s.core.name == "from file"
    assert s.core.httpport == 9001
    assert s.storage.path == "/flag"
    assert s.storage.mapsize == 2 << 30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[core]\nhttpport = many\n", "d.gcfg:2: core.httpport: 'many' is not an integer"),
        ("[core]\nhttpport = 70000\n", "d.gcfg:2: core.httpport: must be a port (0-65535)"),
        ("[core]\nnmae = x\n", "d.gcfg:2: core.nmae: unknown setting"),
        ("[nowhere]\nkey = 1\n", "d.gcfg:2: nowhere.key: unknown setting"),
        ("name = x\n", "d.gcfg:1: setting outside of any [section]"),
        ("[core\n", "d.gcfg:1: bad section header '[core'"),
        (
            "[stats]\ntype = graphite\n",
            "d.gcfg:2: stats.type: must be one of statsd, prometheus, none",
        ),
        ("[core]\nloglevelstring = loud\n", "d.gcfg:2: core.loglevelstring: must be one of"),
    ],
)
def test_bad_files_name_the_key_file_and_line(tmp_path: Path, text: str, expected: str) -> None:
    cfg = tmp_path / "d.gcfg"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(cfg, env={})
    assert str(caught.value).startswith(str(tmp_path / expected))


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={"DYNAMIQ_LIMITS_MAXBATCH": "0"})
    assert str(caught.value) == (
        "environment variable DYNAMIQ_LIMITS_MAXBATCH: limits.maxbatch: must be >= 1"
    )


def test_the_cli_prints_one_line_and_no_traceback(tmp_path: Path) -> None:
    cfg = tmp_path / "d.gcfg"
    cfg.write_text("[core]\nhttpport = nope\n")
    done = subprocess.run(
        [sys.executable, "-m", "dynamiq", "serve", "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"dynamiq: configuration error: {cfg}:2: core.httpport: 'nope' is not an integer"
    ]
    missing = subprocess.run(
        [sys.executable, "-m", "dynamiq", "serve", "-c", "/no/such.gcfg"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    flag = subprocess.run(
        [sys.executable, "-m", "dynamiq", "serve", "--limits-maxbatch", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert flag.returncode == 2
    assert "flag --limits-maxbatch: limits.maxbatch: 'x' is not an integer" in flag.stderr


def test_seed_entries_may_carry_their_own_port() -> None:
    s = load_settings(
        env={
            "DYNAMIQ_CORE_SEEDSERVER": "a, 127.0.0.1:7950,b:1",
            "DYNAMIQ_CORE_SEEDPORT": "7000",
            "DYNAMIQ_CLUSTER_SECRET": SECRET,
        }
    )
    assert s.core.seeds() == ["a:7000", "127.0.0.1:7950", "b:1"]
    assert s.gossip and s.cluster.shared_secret() == SECRET


def test_seeds_need_a_secret_and_a_reachable_address() -> None:
    with pytest.raises(ConfigError, match=r"cluster\.secret: is required"):
        load_settings(env={"DYNAMIQ_CORE_SEEDSERVER": "a"})
    with pytest.raises(ConfigError, match=r"cluster\.address"):
        load_settings(
            env={
                "DYNAMIQ_CLUSTER_SECRET": SECRET,
                "DYNAMIQ_CORE_HTTPADDRESS": "0.0.0.0",
                "DYNAMIQ_AUTH_ENABLED": "false",
            }
        )
    with pytest.raises(ConfigError, match=r"core\.seedserver"):
        load_settings(
            env={"DYNAMIQ_CORE_SEEDSERVER": "a:notaport", "DYNAMIQ_CLUSTER_SECRET": SECRET}
        )
    alone = load_settings(env={})
    assert not alone.gossip and alone.core.seeds() == []


def test_the_secret_can_come_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from a file, and long enough to sign\n")
    s = load_settings(env={"DYNAMIQ_CLUSTER_SECRET_FILE": str(secret)})
    assert s.gossip and s.cluster.shared_secret() == "from a file, and long enough to sign"
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(ConfigError, match="the file is empty"):
        load_settings(env={"DYNAMIQ_CLUSTER_SECRET_FILE": str(empty)}).cluster.shared_secret()
    with pytest.raises(ConfigError, match="not both"):
        load_settings(env={"DYNAMIQ_CLUSTER_SECRET": SECRET, "DYNAMIQ_CLUSTER_SECRET_FILE": "b"})


def test_short_secrets_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cluster\.secret: must be at least 32 bytes"):
        load_settings(env={"DYNAMIQ_CLUSTER_SECRET": "x" * 31})
    short = tmp_path / "short"
    short.write_text("x" * 31)
    settings = load_settings(env={"DYNAMIQ_CLUSTER_SECRET_FILE": str(short)})
    with pytest.raises(ConfigError, match=r"cluster\.secret_file: must be at least 32 bytes"):
        settings.cluster.shared_secret()
    with pytest.raises(ConfigError, match=r"auth\.adminkey: must be at least 32 bytes"):
        load_settings(env={"DYNAMIQ_AUTH_ADMINKEY": "x" * 31})
    assert load_settings(env={"DYNAMIQ_CLUSTER_SECRET": "x" * 32}).gossip


def test_keys_are_on_beyond_loopback_and_then_need_an_administrators_key() -> None:
    with pytest.raises(ConfigError, match=r"auth\.adminkey: is required"):
        load_settings(env={"DYNAMIQ_CORE_HTTPADDRESS": "0.0.0.0"})
    wide = load_settings(
        env={"DYNAMIQ_CORE_HTTPADDRESS": "0.0.0.0", "DYNAMIQ_AUTH_ADMINKEY": SECRET}
    )
    assert wide.auth.on(wide.core.httpaddress) and wide.auth.admin_key() == SECRET
    off = load_settings(
        env={"DYNAMIQ_CORE_HTTPADDRESS": "0.0.0.0", "DYNAMIQ_AUTH_ENABLED": "false"}
    )
    assert not off.auth.on(off.core.httpaddress)
    local = load_settings(env={})
    assert not local.auth.on(local.core.httpaddress)
    with pytest.raises(ConfigError, match=r"auth\.enabled"):
        load_settings(env={"DYNAMIQ_AUTH_ENABLED": "maybe"})


def test_tls_files_come_in_pairs_and_must_be_readable(tmp_path: Path) -> None:
    cert, key = tmp_path / "node.pem", tmp_path / "node.key"
    cert.write_text("x")
    key.write_text("x")
    with pytest.raises(ConfigError, match=r"tls\.keyfile: is required when tls\.certfile"):
        load_settings(env={"DYNAMIQ_TLS_CERTFILE": str(cert)})
    with pytest.raises(ConfigError, match=r"tls\.certfile: is required when tls\.keyfile"):
        load_settings(env={"DYNAMIQ_TLS_KEYFILE": str(key)})
    with pytest.raises(ConfigError, match=r"tls\.certfile: is required when tls\.cafile"):
        load_settings(env={"DYNAMIQ_TLS_CAFILE": str(cert)})
    with pytest.raises(ConfigError, match=r"tls\.peercafile: cannot read"):
        load_settings(
            flags={
                "tls.certfile": str(cert),
                "tls.keyfile": str(key),
                "tls.peercafile": str(tmp_path / "missing.pem"),
            }
        )
    on = load_settings(flags={"tls.certfile": str(cert), "tls.keyfile": str(key)}, env={})
    assert on.tls.enabled and not load_settings(env={}).tls.enabled
