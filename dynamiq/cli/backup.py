"""``dynamiq backup``: a consistent copy of a node's embedded store while it serves."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dynamiq.config.sources import load_settings
from dynamiq.errors import ConfigError

__all__ = ["register"]

MIB = 1 << 20


def register(sub: Any) -> None:
    """Add ``backup`` to the ``dynamiq`` parser's subcommands."""
    backup = sub.add_parser(
        "backup",
        help="copy a node's LMDB store while it serves",
        description="Write a consistent, compacted copy of the embedded (LMDB) store into "
        "DEST, a new directory, while its node keeps serving; print what it holds. A node "
        "started on the copy (--storage-path DEST) serves every message acknowledged "
        "before the backup began. Redis and Riak are backed up with their own tools.",
    )
    backup.add_argument("dest", metavar="DEST", help="a new directory for the copy")
    where = backup.add_mutually_exclusive_group()
    where.add_argument("-c", "--config", help="the node's configuration file (its storage.path)")
    where.add_argument("--path", help="the node's data directory (storage.path)")
    backup.add_argument("--json", action="store_true", help="machine-readable output")
    backup.set_defaults(main=run_backup)


def run_backup(args: argparse.Namespace) -> int:
    """Back up the store the arguments name; return the exit status."""
    from dynamiq.storage.lmdb.backup import backup

    try:
        source = _data_dir(args)
        shown = sys.stderr.isatty() and not args.json
        held = backup(source, Path(args.dest), _progress if shown else None)
    except ConfigError as exc:
        print(f"dynamiq: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"source": str(source), "dest": args.dest, **asdict(held)}))
    else:
        print(
            f"backed up {source} into {args.dest}: {held.queues} queues, "
            f"{held.messages:,} messages, {held.bytes / MIB:,.1f} MiB"
        )
    return 0


def _data_dir(args: argparse.Namespace) -> Path:
    if args.path is not None:
        return Path(args.path)
    settings = load_settings(args.config)
    if settings.storage.backend != "lmdb":
        raise ConfigError(
            f"the node keeps its messages in {settings.storage.backend}: back it up with "
            "that store's own tools (see docs/how-to/backup.md)"
        )
    return Path(settings.storage.path)


def _progress(copied: int, total: int) -> None:
    done = min(100, copied * 100 // total) if total else 100
    end = "\n" if copied >= total else ""
    print(
        f"\rcopied {copied / MIB:,.1f} of about {total / MIB:,.1f} MiB ({done}%)",
        end=end,
        file=sys.stderr,
        flush=True,
    )
