"""Mutants of `.ptd` files (header bytes and fields, the table's structure, the file cut or grown) give typed
errors only, each in milliseconds: loaded beside their program and run, nothing but an etbuild error may come
out (an InvalidData naming the file and field, or the key a program asks for), and no call may hang.

A small seeded subset runs by default; `python -m pytest -m fuzz tests/fuzz/test_ptd_fuzz.py` runs the
larger campaign."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
import torch

from etbuild.errors import EtbuildError
from etbuild.pipeline import compile_module
from etbuild.recipe import BackendConfig, WeightsConfig
from etbuild.runtime import Program
from etbuild.runtime.data_files import data_file
from tests.fuzz.ptd_mutators import MUTATORS

SLOWEST_S = 0.5  # per mutant, load and one call; they take about a millisecond
DEFAULT_COUNT, FUZZ_COUNT = 40, 1500


@pytest.fixture(scope="module")
def corpus() -> dict[str, tuple[bytes, bytes, np.ndarray]]:
    """Programs and their `.ptd`: constants with layouts (portable), XNNPACK's named data without them."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(2, 8)
    out = {}
    for name, backends in (("portable", ()), ("xnnpack", (BackendConfig("xnnpack", {}),))):
        built = compile_module(model, (x,), backends=backends, weights=WeightsConfig("w"))
        out[name] = (built.pte, built.ptd, x.numpy())
    return out


def attempt(pte: bytes, ptd: bytes, x: np.ndarray) -> tuple[str, float]:
    """Load the mutant beside its program and run it once: ("ran" | "typed: <class>", seconds)."""
    start = time.perf_counter()
    try:
        Program.from_bytes(pte, [data_file(ptd, "mutant.ptd")]).load_method()(x)
        outcome = "ran"
    except EtbuildError as exc:
        outcome = f"typed: {type(exc).__name__}"
    return outcome, time.perf_counter() - start


def campaign(corpus: dict, name: str, mutator: str, count: int, seed: int = 0) -> dict[str, int]:
    pte, ptd, x = corpus[name]
    rng = random.Random(f"{seed}-{name}-{mutator}")
    attempt(pte, ptd, x)  # warm: the first load imports the backend and compiles its loops
    tally: dict[str, int] = {}
    slowest = 0.0
    for _ in range(count):
        outcome, seconds = attempt(pte, MUTATORS[mutator](ptd, rng), x)
        tally[outcome] = tally.get(outcome, 0) + 1
        slowest = max(slowest, seconds)
    assert slowest < SLOWEST_S, f"a mutant took {slowest:.3f} s"
    return tally


def test_the_corpus_runs_unmutated(corpus):
    for pte, ptd, x in corpus.values():
        assert attempt(pte, ptd, x)[0] == "ran"


@pytest.mark.parametrize("mutator", sorted(MUTATORS))
@pytest.mark.parametrize("name", ["portable", "xnnpack"])
def test_mutants_give_typed_errors_only(corpus, name, mutator):
    tally = campaign(corpus, name, mutator, DEFAULT_COUNT)
    assert sum(tally.values()) == DEFAULT_COUNT
    assert any(k.startswith("typed") for k in tally), tally  # the mutants reach the checks


@pytest.mark.fuzz
@pytest.mark.parametrize("mutator", sorted(MUTATORS))
@pytest.mark.parametrize("name", ["portable", "xnnpack"])
def test_many_mutants_give_typed_errors_only(corpus, name, mutator):
    tally = campaign(corpus, name, mutator, FUZZ_COUNT, seed=1)
    assert sum(tally.values()) == FUZZ_COUNT
