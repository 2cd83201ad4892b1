"""The fuzz tier's corpora, built once per session (see corpus.py)."""

from __future__ import annotations

import pytest

from tests.conftest import HAS_EXECUTORCH
from tests.fuzz.corpus import Corpus, executorch_built, ours


@pytest.fixture(scope="session")
def ours_corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return ours(tmp_path_factory.mktemp("fuzz-build"))


@pytest.fixture(scope="session")
def executorch_corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    if not HAS_EXECUTORCH:
        pytest.skip("executorch (the interop oracle) is not installed")
    return executorch_built(tmp_path_factory.mktemp("fuzz-executorch"))
