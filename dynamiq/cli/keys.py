"""``dynamiq keys``: make, list and revoke application keys; make secrets."""

from __future__ import annotations

import argparse
from typing import Any

from dynamiq.access.keys import ROLES, new_secret
from dynamiq.cli.output import Output
from dynamiq.client import AsyncClient

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``keys`` to the ``dynamiq`` parser's subcommands."""
    keys = sub.add_parser("keys", help="make, list or revoke application keys (administrators)")
    actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser(
        "create", parents=[common], help="make a key; it is printed this once"
    )
    create.add_argument("application", help="the application (namespace) it belongs to")
    create.add_argument("role", choices=ROLES)
    create.add_argument("--description", default="", help="what the key is for")
    create.add_argument(
        "--rate", type=float, metavar="N", help="at most N requests per second on each node"
    )
    create.add_argument(
        "--aws",
        action="store_true",
        help="with an AWS credential (access key id and secret) for the SQS/SNS endpoint",
    )
    create.set_defaults(run=create_key)
    listed = actions.add_parser("list", parents=[common], help="every key (never its secret)")
    listed.set_defaults(run=list_keys)
    show = actions.add_parser(
        "show", parents=[common], help="one key, by its id or its AWS access key id"
    )
    show.add_argument("key_id")
    show.set_defaults(run=show_key)
    revoke = actions.add_parser("revoke", parents=[common], help="revoke a key on every node")
    revoke.add_argument("key_id")
    revoke.set_defaults(run=revoke_key)
    signing = actions.add_parser(
        "rotate-signing",
        parents=[common],
        help="make a new key to sign what topics push (the old certificate stays served)",
    )
    signing.set_defaults(run=rotate_signing)
    sealing = actions.add_parser(
        "rotate-sealing",
        parents=[common],
        help="seal every AWS credential's secret under a new cluster key",
    )
    sealing.set_defaults(run=rotate_sealing)
    secret = actions.add_parser(
        "secret", help="print a new random secret (an administrator's key, a cluster secret)"
    )
    secret.set_defaults(main=print_secret)


async def create_key(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    made = await client.create_key(
        args.application,
        args.role,
        description=args.description,
        requests_per_second=args.rate,
        aws=args.aws,
    )
    if out.as_json:
        out.json(made)
        return 0
    out.line(made["key"])
    if made.get("access_key_id"):
        out.line(f"aws_access_key_id = {made['access_key_id']}")
        out.line(f"aws_secret_access_key = {made['secret_access_key']}")
        out.note(f"account {made['account']}: the application's, in its ARNs and queue URLs")
    out.note(
        f"key {made['key_id']} ({made['role']} of {made['application']}): "
        "keep it now, it is not shown again"
    )
    return 0


async def rotate_sealing(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    out.result(await client.rotate_sealing_key())
    return 0


async def show_key(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    keys = await client.keys()
    found = [k for k in keys if args.key_id in (k["key_id"], k.get("access_key_id"))]
    if not found:
        out.note(f"no key {args.key_id}")
        return 1
    out.result(found[0])
    return 0


async def rotate_signing(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    made = await client.rotate_signing_key()
    out.result(made)
    return 0


async def list_keys(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    keys = await client.keys()
    headers = (
        "key",
        "application",
        "role",
        "aws id",
        "created",
        "last used",
        "rate",
        "description",
    )
    rows = [
        [
            k["key_id"],
            k["application"],
            k["role"],
            k.get("access_key_id") or "-",
            k["created"],
            k["last_used"] or "-",
            k["requests_per_second"] or "-",
            k["description"],
        ]
        for k in keys
    ]
    out.result(keys, headers, rows)
    return 0


async def revoke_key(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    await client.revoke_key(args.key_id)
    out.result({"revoked": args.key_id})
    return 0


def print_secret(args: argparse.Namespace) -> int:
    """Print 32 random bytes as URL-safe base64 (43 characters)."""
    print(new_secret())
    return 0
