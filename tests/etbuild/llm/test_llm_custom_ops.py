"""`etbuild.llm.custom_ops`: the `llama::` operators' eager kernels agree with torch's attention.

The kernels are called as functions: in a process where executorch's library registered the
operators first, `torch.ops.llama` holds executorch's kernels, not these."""

from __future__ import annotations

import pytest
import torch

from etbuild.llm import custom_ops


@pytest.fixture(scope="module", autouse=True)
def _defined() -> None:
    custom_ops.define()


def test_schemas_are_executorchs():
    assert str(torch._C.parse_schema(f"llama::{custom_ops.SCHEMAS[1]}")) == (
        "llama::update_cache.out(Tensor value, Tensor(a!) cache, SymInt start_pos, *, Tensor(b!) out) -> Tensor(b!)")
    assert str(torch.ops.llama.custom_sdpa.default._schema).startswith(  # whichever library defined it
        "llama::custom_sdpa(Tensor query, Tensor key, Tensor value, SymInt start_pos, Tensor? attn_mask=None")


def test_update_cache_writes_the_positions_in_place():
    cache = torch.zeros(1, 8, 2, 4)
    value = torch.randn(1, 3, 2, 4)
    result = custom_ops.update_cache(value, cache, 2)
    assert result.shape == (1,)
    assert torch.equal(cache[:, 2:5], value)
    assert not cache[:, :2].any() and not cache[:, 5:].any()


def test_update_cache_past_the_cache_is_an_error():
    with pytest.raises(ValueError, match="past the cache of 8"):
        custom_ops.update_cache(torch.randn(1, 3, 2, 4), torch.zeros(1, 8, 2, 4), 6)


def test_custom_sdpa_attends_over_the_filled_positions_only():
    torch.manual_seed(0)
    start, new, heads, kv_heads, dim = 5, 3, 4, 2, 8
    keys, values = torch.randn(1, 16, kv_heads, dim), torch.randn(1, 16, kv_heads, dim)
    query = torch.randn(1, new, heads, dim)
    got = custom_ops.custom_sdpa(query, keys, values, start, None, 0.0, True, None)
    length = start + new
    k = keys[:, :length].transpose(1, 2).repeat_interleave(2, dim=1)
    v = values[:, :length].transpose(1, 2).repeat_interleave(2, dim=1)
    for row in range(new):
        q = query[:, row:row + 1].transpose(1, 2)
        seen = start + row + 1
        want = torch.nn.functional.scaled_dot_product_attention(q, k[:, :, :seen], v[:, :, :seen])
        torch.testing.assert_close(got[:, row:row + 1], want.transpose(1, 2))
    values[:, length:] = 1e6  # positions past the filled part do not count
    torch.testing.assert_close(custom_ops.custom_sdpa(query, keys, values, start, None, 0.0, True, None), got)
