"""The fuzz tier: mutants of real programs load and run with only etbuild errors, fast, in bounded memory.

Run with `python -m pytest -m fuzz tests/fuzz` (outside the default run). Per corpus (our zoo
programs; ExecuTorch's builds of the same models) and mutator, `COUNTS` mutants run in a child
process (`python -m tests.fuzz.harness`), so that a crash of the interpreter fails the test
with the mutant that caused it. The contract: no exception other than etbuild's, no call over
1 s, no MemoryError, no crash. docs/hardening.md records the numbers of a run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.corpus import ROOT, Corpus

pytestmark = pytest.mark.fuzz

COUNTS = {"bytes": 6000, "structure": 1200}  # per corpus; seeded (seed 0): every run sees the same mutants
SEED = 0


def run_campaign(corpus: Corpus, mutator: str, tmp_path: Path) -> dict:
    """Run one seeded campaign in a child process; its tally (see tests.fuzz.harness.Tally)."""
    progress = tmp_path / "progress"
    command = [
        sys.executable, "-m", "tests.fuzz.harness", "--json", "--mutator", mutator, "--count", str(COUNTS[mutator]),
        "--seed", str(SEED), "--progress", str(progress), *map(str, corpus.samples),
    ]
    # One BLAS thread: on a shared machine, BLAS thread pools fighting over cores make calls slow.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        last = progress.read_text() if progress.exists() else "?"
        pytest.fail(f"the harness died ({proc.returncode}) at mutant {last} (seed {SEED}, {mutator}):\n{proc.stderr}")
    tally = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\n{corpus.name}/{mutator}: {tally['mutants']} mutants in {tally['seconds']:.0f} s, "
          f"slowest call {tally['slowest_call_s']:.3f} s: {tally['outcomes']}; raw causes: {tally['raw_causes']}")
    return tally


@pytest.mark.parametrize("mutator", sorted(COUNTS))
def test_mutants_of_our_programs(ours_corpus: Corpus, mutator: str, tmp_path: Path) -> None:
    tally = run_campaign(ours_corpus, mutator, tmp_path)
    assert tally["mutants"] == COUNTS[mutator]
    assert tally["breaches"] == []


@pytest.mark.parametrize("mutator", sorted(COUNTS))
def test_mutants_of_executorch_programs(executorch_corpus: Corpus, mutator: str, tmp_path: Path) -> None:
    tally = run_campaign(executorch_corpus, mutator, tmp_path)
    assert tally["mutants"] == COUNTS[mutator]
    assert tally["breaches"] == []
