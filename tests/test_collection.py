"""Every test file under tests/ runs under the README's command, `python -m pytest`.

pytest's default `norecursedirs` skips folders named `build`, which once kept tests/etbuild/build/ out of every
run while its tests passed when named. A file may stay out of a run only by saying why: a module-level
`pytest.skip(reason)` (or `importorskip`), which pytest reports as skipped. Markers (`slow`, `fuzz`, `models`)
deselect tests; they do not stop collection, so the check collects with every marker (`-m ""`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_COLLECTED = re.compile(r"^(tests/\S+?\.py)(?:::|: \d+$)")
_SKIPPED = re.compile(r"^SKIPPED \[\d+\] (tests/\S+?\.py):\d+: \S")


def every_test_file() -> set[str]:
    """Every `test_*.py` file under tests/, relative to the repository."""
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")
            if "__pycache__" not in p.parts}


def accounted_for(collect_output: str) -> set[str]:
    """The files a `pytest --collect-only -q -rs` output collected or skipped with a reason."""
    found = set()
    for line in collect_output.splitlines():
        match = _COLLECTED.match(line) or _SKIPPED.match(line)
        if match:
            found.add(match.group(1))
    return found


def test_the_parser_reads_both_listings_and_reasoned_skips() -> None:
    output = ("tests/a/test_x.py::test_one\ntests/test_y.py: 3\n\n=== short test summary info ===\n"
              "SKIPPED [1] tests/b/test_z.py:16: executorch is not installed\ntests/test_w.py\n")
    assert accounted_for(output) == {"tests/a/test_x.py", "tests/test_y.py", "tests/b/test_z.py"}


def test_every_test_file_is_collected() -> None:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "", "-rs",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    missing = sorted(every_test_file() - accounted_for(proc.stdout))
    assert every_test_file() and not missing, "test files `python -m pytest` never collects:\n" + "\n".join(missing)
