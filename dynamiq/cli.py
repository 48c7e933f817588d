"""The ``dynamiq`` command."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from dynamiq import __version__
from dynamiq.config import keys, load_settings
from dynamiq.errors import BackendUnavailable, ConfigError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dynamiq", description="Dynamiq queue daemon")
    parser.add_argument("--version", action="version", version=f"dynamiq {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run a node",
        description="Run a node. Every setting can also be given as "
        "DYNAMIQ_<SECTION>_<KEY> in the environment.",
    )
    serve.add_argument("-c", "--config", help="gcfg/INI configuration file")
    for key in keys():
        serve.add_argument(
            f"--{key.replace('.', '-')}", dest=key, metavar="VALUE", help=f"override {key}"
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    flags = {k: v for k, v in vars(args).items() if k in keys() and v is not None}
    try:
        settings = load_settings(args.config, flags=flags)
    except ConfigError as exc:
        print(f"dynamiq: configuration error: {exc}", file=sys.stderr)
        return 2
    from dynamiq.daemon import serve
    from dynamiq.logs import configure

    configure(settings.core.loglevelstring)
    try:
        _run(serve(settings))
    except ConfigError as exc:
        print(f"dynamiq: configuration error: {exc}", file=sys.stderr)
        return 2
    except BackendUnavailable as exc:
        print(f"dynamiq: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"dynamiq: cannot listen on {settings.core.httpaddress}:"
            f"{settings.core.httpport}: {exc.strerror}",
            file=sys.stderr,
        )
        return 1
    return 0


def _run(coro: object) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)  # type: ignore[arg-type]
    else:
        uvloop.run(coro)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
