"""v2 fuzzed from its own OpenAPI document, with keys off and on.

Every operation is called with data that fits the document and with data that
does not, then in sequences that follow the document's links (a queue made,
published to, received from, its messages deleted), by the schemathesis
command against a node process. Every check is on: no server error, every
answer as documented (status, body, content type, headers), invalid input
refused, valid input taken, and with keys on, no operation served without one.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ADMIN_KEY, NodeProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CONFIG = Path(__file__).with_name("schemathesis.toml")
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
SEED = 20261124  # the same examples on every run; change it to explore others
EXAMPLES = 25  # per operation and phase


@pytest.mark.parametrize("keyed", [False, True], ids=["keys-off", "keys-on"])
def test_v2_answers_as_its_openapi_document_says(tmp_path: Path, keyed: bool) -> None:
    # With keys on, the fuzzer sends many wrong ones: none is refused for their number.
    keys = ["--auth-enabled", "true", "--auth-adminkey", ADMIN_KEY, "--auth-failedburst", "1000000"]
    # Long polls of at most 2 s keep the run short (the document says this node's limit).
    wait = ["--limits-maxwaitseconds", "2"]
    node = NodeProcess(tmp_path / "data", *wait, *(keys if keyed else [])).start()
    try:
        header = ["--header", f"Authorization: Bearer {ADMIN_KEY}"] if keyed else []
        run = subprocess.run(
            [
                str(SCHEMATHESIS),
                "--config-file",
                str(CONFIG),
                "--no-color",
                "run",
                f"{node.url}/v2/openapi.json",
                "--checks",
                "all",
                "--max-examples",
                str(EXAMPLES),
                "--seed",
                str(SEED),
                "--workers",
                "1",
                "--generation-database",
                "none",
                *header,
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=540,
        )
    finally:
        node.stop()
    report = run.stdout + run.stderr
    assert run.returncode == 0, report
    # the stateful phase followed the document's links (none was usable before they were
    # declared: every sequence stopped at a made-up name)
    covered = re.search(r"API Links:\s+(\d+) covered / (\d+) selected", report)
    assert covered and int(covered[1]) > 0, report
    assert not [line for line in node.log if "Traceback" in line], node.log
