#!/usr/bin/env bash
# Create .venv and install Dynamiq with the extras the tests and checks need.
# Idempotent: a second run only installs what changed.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup.sh: Python 3.11 or newer is required (found: $("$PYTHON" --version 2>&1))" >&2
    exit 1
fi

extras=${DYNAMIQ_EXTRAS:-test,dev,bench,spark}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=.venv/.installed-$(cat pyproject.toml | sha1sum | cut -c1-12)-${extras//,/_}
if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[${extras}]"
    rm -f .venv/.installed-*
    touch "$stamp"
fi
