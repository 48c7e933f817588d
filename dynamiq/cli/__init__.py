"""The ``dynamiq`` command: run nodes, and talk to them.

Every command but ``serve`` and ``cluster`` talks to nodes through the Python
client: ``--url`` (a comma list of nodes, default ``DYNAMIQ_HOSTS``, else
http://127.0.0.1:8081), failing over between them. ``--json`` prints
machine-readable output. Exit statuses:

- 0: done;
- 1: a node answered with an error (the message says which), or work was
  left undone (a redrive failed, deletes no node answered);
- 2: the command was used wrongly;
- 3: no node could be reached;
- 130: interrupted by Ctrl-C before it finished (``consume`` stops cleanly
  on Ctrl-C and exits 0).
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
from collections.abc import Sequence

from dynamiq import __version__
from dynamiq.cli import admin, backup, keys, messages, serve
from dynamiq.cli.output import Output
from dynamiq.cli.usage import UsageError
from dynamiq.client import AsyncClient
from dynamiq.errors import BackendUnavailable, DynamiqError

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_UNREACHABLE", "EXIT_USAGE", "main", "parser"]

EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 1, 2, 3, 130


def parser() -> argparse.ArgumentParser:
    """The whole command line (``dynamiq --help`` lists every command)."""
    top = argparse.ArgumentParser(
        prog="dynamiq",
        description="Dynamiq: a distributed queue with SQS/SNS semantics. "
        "Exit statuses: 0 done, 1 error from a node, 2 usage, 3 unreachable.",
    )
    top.add_argument("--version", action="version", version=f"dynamiq {__version__}")
    # --url and --json go before the command or after it (a value given after it
    # wins; not given there, it does not hide the one before).
    common = argparse.ArgumentParser(add_help=False)
    for options, default in ((top, None), (common, argparse.SUPPRESS)):
        options.add_argument(
            "--url",
            default=default,
            help="node URLs, comma-separated (default $DYNAMIQ_HOSTS or http://127.0.0.1:8081)",
        )
        options.add_argument(
            "--json", action="store_true", default=default or False, help="machine-readable output"
        )
        options.add_argument(
            "--key-file",
            default=default,
            metavar="FILE",
            help="a file holding the key to send (default $DYNAMIQ_KEY)",
        )
        options.add_argument(
            "--ca-file",
            default=default,
            metavar="FILE",
            help="certificate authorities (PEM) for https:// nodes (default $DYNAMIQ_CA_FILE)",
        )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.register(sub)
    backup.register(sub)
    admin.register(sub, common)
    keys.register(sub, common)
    messages.register(sub, common)
    completion = sub.add_parser("completion", help="print a bash or zsh completion script")
    completion.add_argument("shell", choices=("bash", "zsh"))
    completion.set_defaults(main=_completion)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = parser().parse_args(argv)
    if hasattr(args, "main"):  # serve, cluster, backup, completion: no client
        status: int = args.main(args)
        return status
    out = Output(args.json)
    try:
        return asyncio.run(_talk(args, out))
    except UsageError as exc:
        print(f"dynamiq: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BackendUnavailable as exc:
        print(f"dynamiq: no node answered: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except DynamiqError as exc:
        print(f"dynamiq: {exc.code}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("dynamiq: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (``| head``): nothing more to say
        sys.stderr.close()
        return 0


async def _talk(args: argparse.Namespace, out: Output) -> int:
    # A command's own spool (``spool flush``) is opened by the command itself.
    try:
        client = AsyncClient(
            args.url, spool=getattr(args, "spool", None), key=_key(args), ca_file=args.ca_file
        )
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"cannot use --ca-file: {exc}") from None
    try:
        status: int = await args.run(args, client, out)
        return status
    finally:
        await client.close()


def _key(args: argparse.Namespace) -> str | None:
    """The key ``--key-file`` holds; None: the client's default ($DYNAMIQ_KEY)."""
    if not args.key_file:
        return None
    try:
        with open(args.key_file, encoding="utf-8") as file:
            return file.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --key-file: {exc}") from None


def _completion(args: argparse.Namespace) -> int:
    try:
        import shtab
    except ImportError:
        print(
            "dynamiq: completion needs the cli extra: pip install 'dynamiq[cli]'", file=sys.stderr
        )
        return EXIT_USAGE
    print(shtab.complete(parser(), shell=args.shell))
    return 0
