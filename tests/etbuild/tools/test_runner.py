"""etbuild.tools.runner without a program: the contract read from constant values, and sampling."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.errors import InvalidProgram
from etbuild.tools.runner import read_contract, sample


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
