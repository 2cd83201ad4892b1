"""The fuzz tier's last results as the table of docs/hardening.md.

    python -m tests.fuzz.report        # reads build/fuzz/results/*.json, written by test_fuzz.py
"""

from __future__ import annotations

import json
import sys
from collections import Counter

from tests.fuzz.test_fuzz import CAMPAIGNS, RESULTS

COLUMNS = ("InvalidProgram", "KernelError", "MethodInputError", "ok", "ok, other outputs")
BYTE_LEVEL = ("bytes", "blob-bytes")


def row(name: str, tally: dict) -> str:
    """One campaign's table row."""
    outcomes = Counter(tally["outcomes"])
    counts = [outcomes.pop(c, 0) for c in COLUMNS]
    other = sum(outcomes.values())  # breaches, and any other etbuild error
    cells = [name, tally["mutants"], f"{tally['seconds']:.0f} s", *counts, other, _slowest(tally)]
    return "| " + " | ".join(map(str, cells)) + " |"


def _slowest(tally: dict) -> str:
    mutant = tally.get("slowest_mutant", -1)
    return f"{tally['slowest_call_s']:.3f} s" + (f" (#{mutant})" if mutant >= 0 else "")


def main() -> int:
    total: Counter[str] = Counter()
    raw: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    slowest = 0.0
    for corpus, mutator in CAMPAIGNS:
        path = RESULTS / f"{corpus}-{mutator}.json"
        if not path.exists():
            print(f"| {corpus} / {mutator} | not run |")
            continue
        tally = json.loads(path.read_text())
        print(row(f"{corpus} ({tally['samples']} programs) / {mutator}", tally))
        total.update(tally["outcomes"])
        raw.update(tally["raw_causes"])
        kinds["byte-level" if mutator in BYTE_LEVEL else "structure-aware"] += tally["mutants"]
        slowest = max(slowest, tally["slowest_call_s"])
    print(f"\nmutants: {dict(kinds)}; outcomes: {dict(total.most_common())}; raw causes in KernelErrors: {dict(raw)};"
          f" slowest call {slowest:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
