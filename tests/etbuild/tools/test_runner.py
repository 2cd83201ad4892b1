"""etbuild.tools.runner without a program: the contract read from constant values, and sampling."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.errors import InvalidProgram, MethodInputError
from etbuild.tools.runner import Runner, read_contract, sample


def test_contract_from_constants() -> None:
    c = read_contract({"get_max_seq_len": 128, "get_max_context_len": 256, "get_bos_id": 1, "get_eos_ids": [2, 7],
                       "enable_dynamic_shape": True}, 127)
    assert (c.max_seq_len, c.max_context_len, c.chunk, c.bos_id, c.eos_ids) == (128, 256, 127, 1, (2, 7))
    assert read_contract({"get_max_seq_len": 128, "enable_dynamic_shape": False}, 1).chunk == 1
    assert read_contract({"get_max_seq_len": 64, "get_eos_ids": 3}, 63).eos_ids == (3,)


@pytest.mark.parametrize(("constants", "message"), [
    ({}, "needs get_max_seq_len"),
    ({"get_max_seq_len": -4}, "get_max_seq_len returns -4; expected a non-negative Int"),
    ({"get_max_seq_len": 8, "get_bos_id": True}, "get_bos_id returns True"),
    ({"get_max_seq_len": 8, "get_eos_ids": [1.5]}, "get_eos_ids returns"),
])
def test_a_bad_contract_is_an_invalid_program(constants: dict, message: str) -> None:
    with pytest.raises(InvalidProgram, match=message):
        read_contract(constants, 7)


def test_sampling() -> None:
    logits = np.log(np.asarray([0.1, 0.6, 0.3]))
    rng = np.random.default_rng(0)
    assert sample(logits, 0.0, 1.0, rng) == 1
    assert {sample(logits, 1.0, 0.5, rng) for _ in range(50)} == {1}  # top-p 0.5: the 0.6 token alone
    assert {sample(logits, 1.0, 0.8, rng) for _ in range(200)} == {1, 2}  # 0.6 + 0.3 cover 0.8
    draws = [sample(logits, 1.0, 1.0, rng) for _ in range(3000)]
    np.testing.assert_allclose(np.bincount(draws, minlength=3) / 3000, [0.1, 0.6, 0.3], atol=0.03)


def test_token_ids_outside_the_vocabulary_are_a_method_input_error_before_any_call() -> None:
    calls: list[np.ndarray] = []

    def forward(tokens: np.ndarray, input_pos: np.ndarray) -> list[np.ndarray]:
        calls.append(tokens)
        return [np.zeros((1, 8), np.float32)]

    contract = read_contract({"get_max_seq_len": 4, "get_max_context_len": 16, "get_vocab_size": 8}, 4)
    assert contract.vocab_size == 8
    runner = Runner(forward, contract)
    for bad, where in ((-1, 1), (8, 1)):
        with pytest.raises(MethodInputError, match=f"token id {bad} \\(position {where} of the tokens given\\) is "
                                                   "out of range: expected 0 … 7"):
            runner.feed([5, bad])
    assert calls == [] and runner.position == 0
    with pytest.raises(MethodInputError, match="token id -3 .* expected ≥ 0"):  # no get_vocab_size: ids ≥ 0
        Runner(forward, read_contract({"get_max_seq_len": 4}, 4)).feed([-3])
    assert list(runner.generate([5, 7], 2)) == [0, 0]
