"""The language-model recipe: it builds and verifies, and greedy generation on its `.pte` in our
runtime gives eager torch's 32 tokens (prefill and decode sharing the KV cache)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from etbuild.cli import main
from etbuild.errors import MethodInputError
from etbuild.runtime import Program
from etbuild.tools.generate import generate
from tests.lm_support import PROMPT, TOKENS, build_lm, eager_tokens


@pytest.fixture(scope="module")
def lm_pte(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_lm(tmp_path_factory.mktemp("build"))


def test_our_runtime_generates_the_eager_tokens(lm_pte: Path) -> None:
    expected = eager_tokens()
    assert len(set(expected)) > 4  # a varied sequence, not one token repeated
    assert generate(lm_pte, PROMPT, TOKENS) == expected


def test_decode_reads_the_cache_prefill_wrote(lm_pte: Path) -> None:
    """decode's logits after prefill are not those of a program whose prefill never ran."""
    token, pos = np.asarray([[5]], np.int64), np.asarray([len(PROMPT)], np.int64)
    program = Program.load(lm_pte)
    prefill, decode = program.load_method("prefill"), program.load_method("decode")
    prefill(np.asarray([PROMPT], np.int64))
    after_prefill = decode(token, pos)[0]
    alone = Program.load(lm_pte).load_method("decode")(token, pos)[0]
    assert np.abs(after_prefill - alone).max() > 0.1


def test_generate_command(lm_pte: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", str(lm_pte), "--prompt", ",".join(map(str, PROMPT)), "--tokens", "5"]) == 0
    assert capsys.readouterr().out.split() == [str(t) for t in eager_tokens()[:5]]


def test_generate_errors(lm_pte: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", str(lm_pte), "--prompt", "1,x"]) == 2
    assert "--prompt '1,x': expected token ids" in capsys.readouterr().err
    with pytest.raises(MethodInputError, match="the prompt is empty"):
        generate(lm_pte, [], 3)


@pytest.mark.parametrize("bad", ["-1", "256"])
def test_a_token_id_outside_the_vocabulary_is_an_input_error(lm_pte: Path, bad: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """-1 is not the last token: `--prompt 5,-1` stops (exit 6) as an id past the vocabulary of 256 does."""
    assert main(["generate", str(lm_pte), "--prompt", f"5,{bad}", "--tokens", "3"]) == MethodInputError.exit_code
    message = f"token id {bad} (position 1 of the tokens given) is out of range: expected 0 … 255"
    assert message in capsys.readouterr().err
