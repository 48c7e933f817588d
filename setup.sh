#!/usr/bin/env bash
# Create .venv and install Dynamiq from its lock, with the extras the tests and
# checks need. Idempotent: a second run only installs what changed.
# ./setup.sh --renew (`make lock`) first renews the lock to the newest releases.
set -euo pipefail
cd "$(dirname "$0")"

if [ "${1:-}" = "--riak" ]; then
    # Riak's bucket types are made only with riak-admin, on a Riak node itself.
    url=${2:?usage: setup.sh --riak http://host:8098}
    echo "Run once on one node of the Riak cluster at $url:"
    echo
    echo "  riak-admin bucket-type create messages '{\"props\":{\"allow_mult\":true}}'"
    echo "  riak-admin bucket-type activate messages"
    echo "  riak-admin bucket-type create maps '{\"props\":{\"datatype\":\"map\"}}'"
    echo "  riak-admin bucket-type activate maps"
    echo
    echo "Then run nodes with [storage] backend = riak and [core] riaknodes = host:8098,..."
    for type in messages maps; do
        if curl -fsS "$url/types/$type/props" >/dev/null 2>&1; then
            echo "bucket type $type: present at $url"
        else
            echo "bucket type $type: not found at $url (or the node is unreachable)"
        fi
    done
    exit 0
fi

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup.sh: Python 3.11 or newer is required (found: $("$PYTHON" --version 2>&1))" >&2
    exit 1
fi

# uv installs the project from its lock (uv.lock): every dependency, the extras
# and the test and lint tools at the releases CI last passed, each checked
# against its hash. uv itself is pinned with its hashes in scripts/uv.txt and
# lives in .uv/, apart from the environment it builds.
if [ ! -x .uv/bin/uv ] || ! cmp -s scripts/uv.txt .uv/uv.txt; then
    rm -rf .uv
    "$PYTHON" -m venv .uv
    .uv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes -r scripts/uv.txt
    cp scripts/uv.txt .uv/uv.txt
fi
export UV_PROJECT_ENVIRONMENT=.venv UV_PYTHON_DOWNLOADS=never
if [ "${1:-}" = "--renew" ]; then
    # `make lock`: the newest releases pyproject.toml's ranges allow.
    .uv/bin/uv lock --upgrade --python "$PYTHON"
fi
extras=${DYNAMIQ_EXTRAS:-test,dev,bench,spark,cli,docs}
flags=()
for extra in ${extras//,/ }; do flags+=(--extra "$extra"); done
# --locked: a lock that no longer matches pyproject.toml stops here (run `make lock`).
.uv/bin/uv sync --quiet --locked --python "$PYTHON" "${flags[@]}"

# Clients of the SQS endpoint from elsewhere, fetched once (the tests that need
# them skip without them, and fail in CI): botocore 1.31's SQS model, the last
# to speak the query protocol, and the JavaScript SDK v3, which checks the MD5
# of every message it is answered.
model=.venv/aws-models/sqs/2012-11-05/service-2.json
if [ ! -f "$model" ]; then
    wheels=$(mktemp -d)
    pin="botocore==1.31.0 --hash=sha256:bcb0601fabc9f6fb2f7c592e7c9c4dece69ccd8782bfe6cf991a14f7fa35e6f3"
    if echo "$pin" >"$wheels/pin.txt" && .uv/bin/python -m pip download --quiet --disable-pip-version-check \
        --no-deps --require-hashes -r "$wheels/pin.txt" -d "$wheels"; then
        .uv/bin/python - "$wheels"/botocore-1.31.0-*.whl "$model" <<'PY'
import pathlib, sys, zipfile

target = pathlib.Path(sys.argv[2])
target.parent.mkdir(parents=True, exist_ok=True)
target.write_bytes(zipfile.ZipFile(sys.argv[1]).read(f"botocore/data/{target.parts[-3]}/{target.parts[-2]}/service-2.json"))
PY
    else
        echo "setup.sh: could not fetch botocore 1.31's SQS model (query-protocol tests skip)" >&2
    fi
    rm -rf "$wheels"
fi
if command -v npm >/dev/null 2>&1 && [ ! -d tests/sqs/js/node_modules ]; then
    # npm ci: exactly what tests/sqs/js/package-lock.json names.
    npm ci --silent --no-audit --no-fund --prefix tests/sqs/js \
        || echo "setup.sh: npm ci failed (the JavaScript SDK test skips)" >&2
fi
