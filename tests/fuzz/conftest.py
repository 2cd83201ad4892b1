"""The fuzz tier's corpora, built once per session (see corpus.py)."""

from __future__ import annotations

import pytest

from tests.conftest import HAS_EXECUTORCH
from tests.fuzz.corpus import ROOT, Corpus, executorch_built, llm_built, ours, xnnpack_built


@pytest.fixture(scope="session")
def ours_corpus() -> Corpus:
    return ours(ROOT / "build" / "fuzz" / "ours")  # etbuild's own build state keeps it up to date


@pytest.fixture(scope="session")
def executorch_corpus() -> Corpus:
    if not HAS_EXECUTORCH:
        pytest.skip("executorch (the interop oracle) is not installed")
    return executorch_built()


@pytest.fixture(scope="session")
def xnnpack_corpus() -> Corpus:
    if not HAS_EXECUTORCH:
        pytest.skip("executorch (the interop oracle) is not installed")
    return xnnpack_built()


@pytest.fixture(scope="session")
def llm_corpus() -> Corpus:
    if not HAS_EXECUTORCH:
        pytest.skip("executorch (the interop oracle) is not installed")
    return llm_built()
