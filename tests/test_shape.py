"""The tree's shape, held as features land: the house's sizes, checked on every run.

Modules of the package and the benches stay readable in one sitting, functions
on a screen or two, test files small enough to find a test in, and tests wait
on conditions (``tests.waiting``) or a fake clock rather than on time.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 500  # of dynamiq/ and bench/
MAX_FUNCTION_LINES = 60
MAX_TEST_FILE_LINES = 600
MAX_SLEEPS_IN_TESTS = 50  # calls of any ``sleep`` in tests/, child programs' included
SLEEP = re.compile(r"\bsleep\(")


def _python_files(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "node_modules" not in p.parts)


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (length := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION_LINES
    ]


def test_no_module_of_the_package_or_the_benches_is_over_500_lines() -> None:
    files = _python_files("dynamiq") + _python_files("bench")
    assert len(files) > 100  # the tree was found
    long = [f"{p.relative_to(ROOT)} ({n})" for p in files if (n := _lines(p)) > MAX_MODULE_LINES]
    assert long == [], f"split these by concern (at most {MAX_MODULE_LINES} lines)"


def test_no_function_of_the_package_or_the_benches_is_over_60_lines() -> None:
    long = [
        f for p in _python_files("dynamiq") + _python_files("bench") for f in _long_functions(p)
    ]
    assert long == [], f"split these into named steps (at most {MAX_FUNCTION_LINES} lines)"


def test_no_test_file_is_over_600_lines() -> None:
    files = _python_files("tests")
    long = [f"{p.relative_to(ROOT)} ({n})" for p in files if (n := _lines(p)) > MAX_TEST_FILE_LINES]
    assert long == [], f"split these by what they test (at most {MAX_TEST_FILE_LINES} lines)"


def test_tests_wait_on_conditions_rather_than_on_time() -> None:
    counts = {
        str(p.relative_to(ROOT)): n
        for p in _python_files("tests")
        if (n := len(SLEEP.findall(p.read_text(encoding="utf-8"))))
    }
    total = sum(counts.values())
    most = sorted(counts.items(), key=lambda item: -item[1])[:5]
    assert total <= MAX_SLEEPS_IN_TESTS, (
        f"{total} sleeps in tests (at most {MAX_SLEEPS_IN_TESTS}): wait on a condition "
        f"(tests.waiting) or a fake clock instead; most in {most}"
    )
