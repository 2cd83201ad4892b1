"""The fuzz tier: mutants of real programs load and run with only etbuild errors, fast, in bounded memory.

Run with `python -m pytest -m fuzz tests/fuzz` (outside the default run). Per corpus (our zoo
programs; ExecuTorch's builds of the same models; ExecuTorch's XNNPACK-delegated builds of
them, whose blobs are mutated too) and mutator, `COUNTS` mutants run in a child
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

from etbuild.fsutil import write_json
from tests.fuzz.corpus import ROOT, Corpus

pytestmark = pytest.mark.fuzz

# Mutants per corpus and mutator, seeded (seed 0): every run sees the same mutants. In all,
# 12,000 byte-level (4,000 of them inside XNNPACK blobs) and 2,800 structure-aware (800 of
# them on XNNPACK graphs); and on the LLM programs (export_llm's and ours) 3,000 byte-level
# (1,000 inside blobs) and 1,000 structure-aware (400 on XNNPACK graphs).
COUNTS = {
    "ours": {"bytes": 4000, "structure": 800},
    "executorch": {"bytes": 4000, "structure": 800},
    "xnnpack": {"bytes": 2000, "structure": 400, "blob-bytes": 2000, "blob-structure": 800},
    "llm": {"bytes": 2000, "structure": 600, "blob-bytes": 1000, "blob-structure": 400},
}
SEED = 0
RESULTS = ROOT / "build" / "fuzz" / "results"  # each campaign's tally, for `python -m tests.fuzz.report`


def run_campaign(corpus: Corpus, mutator: str, tmp_path: Path, count: int) -> dict:
    """Run one seeded campaign in a child process; its tally (see tests.fuzz.harness.Tally)."""
    progress = tmp_path / "progress"
    command = [
        sys.executable, "-m", "tests.fuzz.harness", "--json", "--mutator", mutator, "--count", str(count),
        "--seed", str(SEED), "--progress", str(progress), *map(str, corpus.samples),
    ]
    # One BLAS thread: on a shared machine, BLAS thread pools fighting over cores make calls slow.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        last = progress.read_text() if progress.exists() else "?"
        pytest.fail(f"the harness died ({proc.returncode}) at mutant {last} (seed {SEED}, {mutator}):\n{proc.stderr}")
    tally = json.loads(proc.stdout.strip().splitlines()[-1])
    write_json(RESULTS / f"{corpus.name}-{mutator}.json", {**tally, "samples": len(corpus.samples), "seed": SEED})
    print(f"\n{corpus.name}/{mutator}: {tally['mutants']} mutants in {tally['seconds']:.0f} s, slowest call "
          f"{tally['slowest_call_s']:.3f} s (mutant {tally['slowest_mutant']}): {tally['outcomes']}; "
          f"raw causes: {tally['raw_causes']}")
    return tally


CAMPAIGNS = [(corpus, mutator) for corpus, counts in COUNTS.items() for mutator in counts]


@pytest.mark.parametrize(("corpus_name", "mutator"), CAMPAIGNS, ids=[f"{c}-{m}" for c, m in CAMPAIGNS])
def test_mutants_load_and_run_within_the_contract(request: pytest.FixtureRequest, corpus_name: str, mutator: str,
                                                  tmp_path: Path) -> None:
    corpus = request.getfixturevalue(f"{corpus_name}_corpus")
    assert mutator in {m.name for m in corpus.mutators}
    tally = run_campaign(corpus, mutator, tmp_path, COUNTS[corpus_name][mutator])
    assert tally["mutants"] == COUNTS[corpus_name][mutator]
    assert tally["breaches"] == []
