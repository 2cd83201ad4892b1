"""ExecuTorch's export_llm programs (KV cache, custom SDPA, XNNPACK; fp32 and 8da4w) in our runtime: `etbuild run`
loads them, greedy tokens equal ExecuTorch's runtime's (fp32, 32 of 32), teacher-forced next tokens agree (8da4w,
≥ 98%), and `etbuild generate` reads the runner contract, streams text through a tokenizer and stops at EOS.
The programs are built once (tests/export_llm_support.py); a cold build takes a minute or two: `slow`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from etbuild.cli import main
from etbuild.errors import KernelError, MethodInputError
from etbuild.runtime import Program
from etbuild.tools.runner import Runner, load_runner
from etbuild.tools.textgen import Request, executorch_runner, executorch_text
from tests.conftest import HAS_EXECUTORCH
from tests.export_llm_support import TINY, executorch_forward, tiny_program, token_sequence, train_tokenizer

pytestmark = [pytest.mark.interop, pytest.mark.slow,
              pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]


@pytest.fixture(scope="module")
def fp32() -> Path:
    return tiny_program("fp32")


@pytest.fixture(scope="module")
def int4() -> Path:
    return tiny_program("8da4w")


@pytest.fixture(scope="module")
def kv8() -> Path:
    """export_llm's program with its int8 KV cache (`quantize_kv_cache`: `llama::custom_quantized_sdpa`)."""
    return tiny_program("fp32-kv8")


def teacher_forced(forward, tokens: list[int]) -> list[int]:  # noqa: ANN001
    """The argmax after each token, fed one at a time at its position."""
    return [int(np.argmax(forward(np.asarray([[t]], np.int64), np.asarray([i], np.int64))[0])) for i, t in
            enumerate(tokens)]


def test_etbuild_run_loads_them(fp32: Path, int4: Path, tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", in0=np.asarray([[1, 17, 33]], np.int64), in1=np.asarray([0], np.int64))
    for pte in (fp32, int4):
        assert main(["run", str(pte), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz")]) == 0
        ours = np.load(tmp_path / "out.npz")["out0"]
        theirs = executorch_forward(pte)(np.asarray([[1, 17, 33]], np.int64), np.asarray([0], np.int64))[0]
        assert ours.shape == (1, TINY.vocab_size)
        np.testing.assert_allclose(ours, theirs, atol=1e-3 if pte == fp32 else 5e-2)


def test_fp32_greedy_tokens_equal_executorch_runtime(fp32: Path) -> None:
    prompt = token_sequence(70)  # longer than no chunk: prefilled in one call of up to max_seq_len - 1 tokens
    ours = list(load_runner(fp32).generate(prompt, 32))
    theirs = list(executorch_runner(fp32).generate(prompt, 32))
    assert len(ours) == 32 and ours == theirs


def test_8da4w_teacher_forced_agreement(int4: Path) -> None:
    tokens = token_sequence(TINY.max_context_len, seed=1)
    ours = teacher_forced(Program.load(int4).load_method("forward"), tokens)
    theirs = teacher_forced(executorch_forward(int4), tokens)
    agreement = np.mean(np.asarray(ours) == np.asarray(theirs))
    assert agreement >= 0.98, agreement


def test_int8_kv_cache_program_follows_executorch_runtime(kv8: Path) -> None:
    from etbuild.runtime.format.pte import read_program

    program, _ = read_program(kv8.read_bytes())
    assert "llama::custom_quantized_sdpa" in {op.name for plan in program.execution_plan for op in plan.operators}
    ours, theirs = Program.load(kv8).load_method("forward"), executorch_forward(kv8)
    tokens = token_sequence(TINY.max_context_len, seed=2)
    calls = [(tokens[:12], 0)] + [([t], i) for i, t in enumerate(tokens[12:], 12)]  # a chunk, then one a call
    for chunk, position in calls:
        args = (np.asarray([chunk], np.int64), np.asarray([position], np.int64))
        a, b = ours(*args)[0], theirs(*args)[0]
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()))
        assert int(a.argmax()) == int(b.argmax())
    assert list(load_runner(kv8).generate(tokens[:20], 16)) == list(executorch_runner(kv8).generate(tokens[:20], 16))


def test_prefill_in_chunks_gives_the_logits_of_one_call(fp32: Path) -> None:
    prompt = token_sequence(40)
    whole = load_runner(fp32).feed(prompt)
    runner = load_runner(fp32)
    chunked = Runner(runner.forward, dataclasses.replace(runner.contract, chunk=7))
    np.testing.assert_allclose(chunked.feed(prompt), whole, atol=1e-4)
    assert chunked.position == 40


def test_contract_is_read(fp32: Path) -> None:
    contract = load_runner(fp32).contract
    assert (contract.max_seq_len, contract.max_context_len, contract.bos_id, contract.eos_ids) == (
        TINY.max_seq_len, TINY.max_context_len, TINY.bos_id, TINY.eos_ids)
    assert contract.chunk == TINY.max_seq_len - 1  # forward's tokens are dynamic, up to max_seq_len - 1


def test_a_prompt_past_the_context_exits_6(fp32: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompt = ",".join(map(str, token_sequence(TINY.max_context_len + 1)))
    assert main(["generate", str(fp32), "--prompt", prompt]) == 6
    assert f"past the program's context of {TINY.max_context_len} positions" in capsys.readouterr().err
    runner = load_runner(fp32)
    runner.feed(token_sequence(TINY.max_context_len))
    with pytest.raises(MethodInputError, match="past the program's context"):
        runner.feed([5])


def test_a_position_past_the_cache_in_forward_is_a_typed_error(fp32: Path) -> None:
    """Called directly, the program's rotary table (sliced at input_pos, clipped at its end) fails first, at a
    view of the clipped slice: a KernelError; `Runner` refuses the position before the call (MethodInputError)."""
    forward = Program.load(fp32).load_method("forward")
    with pytest.raises(KernelError, match="cannot be viewed"):
        forward(np.asarray([[5, 6]], np.int64), np.asarray([TINY.max_context_len - 1], np.int64))


def test_generation_stops_at_eos(fp32: Path) -> None:
    runner = load_runner(fp32)
    greedy = list(runner.generate(token_sequence(5), 12))
    stop = Runner(load_runner(fp32).forward, dataclasses.replace(runner.contract, eos_ids=(greedy[3],)))
    assert list(stop.generate(token_sequence(5), 12)) == greedy[: greedy.index(greedy[3]) + 1]


def test_sampling_is_seeded(fp32: Path) -> None:
    def draw(seed: int) -> list[int]:
        return list(load_runner(fp32).generate(token_sequence(5), 16, temperature=1.0, top_p=0.9, seed=seed))

    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_generate_text_equals_executorch_text_runner(fp32: Path, tmp_path: Path,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    tokenizer = train_tokenizer(tmp_path / "tokenizer.json")
    request = Request(fp32, "the quick brown fox", 24, tokenizer=tokenizer)
    text, theirs = executorch_text(request)
    capfd.readouterr()
    assert main(["generate", str(fp32), "--prompt", request.prompt, "--tokenizer", str(tokenizer), "--tokens",
                 "24"]) == 0
    out, err = capfd.readouterr()
    assert out == text + "\n" and theirs.generated_tokens == 24
    assert "prompt 4 tokens" in err and "generated 24 tokens" in err and "decode" in err


def test_profile_shows_prefill_and_decode(fp32: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.json"
    assert main(["profile", str(fp32), "--calls", "2", "--top", "3", "--prompt", "16", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "== prefill (16 tokens at position 0)" in out and "== decode (1 token at position 16)" in out
    assert "[1x16x4x16], [1x160x2x16]" in out and "[1x1x4x16], [1x160x2x16]" in out  # custom_sdpa's shapes
    assert (tmp_path / "t.prefill.json").is_file() and (tmp_path / "t.decode.json").is_file()
