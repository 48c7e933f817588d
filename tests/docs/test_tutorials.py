"""The tutorials' code runs as written against a real node: the Python blocks of the
boto3 tutorial and of the README, with only the node's address changed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import NodeFactory

ROOT = Path(__file__).resolve().parents[2]


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("path", ["docs/tutorials/boto3.md", "README.md"])
def test_the_boto3_code_runs_as_written(node_factory: NodeFactory, path: str) -> None:
    node = node_factory().start()
    blocks = [b for b in _python_blocks(ROOT / path) if "boto3" in b]
    assert len(blocks) == 1
    code = blocks[0].replace("http://127.0.0.1:8081", node.url)
    code += "\nprint(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=['All'])['Attributes'])"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "'VisibilityTimeout': '60'" in done.stdout
    assert "'ApproximateNumberOfMessages': '0'" in done.stdout  # received and deleted
