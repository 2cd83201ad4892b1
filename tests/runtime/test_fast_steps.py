"""Load-time fast steps and views (etbuild.runtime.aliasing): the same outputs, bit for bit, as the
kernels called one by one, on programs built by us and by ExecuTorch, and no view where the plan
reuses the memory it would read."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.pipeline import compile_module
from etbuild.runtime import Program, aliasing
from etbuild.runtime.aliasing import Aliaser
from etbuild.runtime.binding import Binder, _noop
from etbuild.runtime.format import program as fb
from etbuild.runtime.kernel_registry import load_all
from tests.conftest import HAS_EXECUTORCH, executorch_pte


class Recurrent(torch.nn.Module):
    """A GRU (slices, splits, squeezes, small elementwise chains) and a conv layer with padding."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = torch.nn.GRU(6, 8, batch_first=True)
        self.conv = torch.nn.Conv1d(8, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.gru(x)
        y = self.conv(h.transpose(1, 2))
        return torch.sigmoid(y).flatten(1) * 2 - y.mean()


class Reuse(torch.nn.Module):
    """A view whose source is dead, in the plan, before the view's last reader runs."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        x = a + 1
        y = x.view(-1)[2:10]  # reads x's memory through a view
        w = (b * 3).view(-1)[:8]  # may be planned over x's bytes: x is dead here
        return y * w + y


@pytest.fixture(autouse=True)
def _seed() -> Iterator[None]:
    torch.manual_seed(0)
    yield


def _plain(monkeypatch: pytest.MonkeyPatch, data: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Outputs with every call made through its kernel (no fast step, no view)."""
    with monkeypatch.context() as m:
        m.setattr(Binder, "_fast_step", lambda *_: None)
        method = Program.from_bytes(data).load_method()
        assert not any(step is _noop for step in method.steps)
        return method(*inputs)


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def test_recurrent_and_conv_program_bit_identical(monkeypatch):
    model, x = Recurrent().eval(), torch.randn(1, 5, 6)
    data = compile_module(model, (x,)).pte
    method = Program.from_bytes(data).load_method()
    assert sum(step is _noop for step in method.steps) >= 8  # slices, squeezes and splits became views (the
    # zero initial state folds at build time, and with it the slices and squeezes that read it)
    for _ in range(2):  # state left by one call does not leak into the next
        got = method(x.numpy())
    _same(got, _plain(monkeypatch, data, [x.numpy()]))
    with torch.no_grad():
        np.testing.assert_allclose(got[0], model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_no_view_reads_memory_the_plan_reuses(monkeypatch):
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    data = compile_module(Reuse(), (a, b)).pte
    got = Program.from_bytes(data).load_method()(a.numpy(), b.numpy())
    _same(got, _plain(monkeypatch, data, [a.numpy(), b.numpy()]))
    np.testing.assert_allclose(got[0], Reuse()(a, b).numpy(), rtol=1e-6)


def test_a_view_is_refused_when_other_values_overlap_its_source():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    method = Program.from_bytes(compile_module(Reuse(), (a, b)).pte).load_method()
    plan, objects = method.plan, list(method.values.objects)
    instructions = plan.chains[0].instructions
    for ev in plan.values:  # pretend the plan put every tensor at the same bytes
        if isinstance(ev.val, fb.Tensor) and ev.val.allocation_info is not None:
            ev.val.allocation_info.memory_offset_low = 0
    lookup = Binder(method.values, load_all().get, {})._info
    aliaser = Aliaser(plan, instructions, objects, lookup, set())
    tried = 0
    for pc, ins in enumerate(instructions):
        info = lookup(ins.instr_args)
        views = aliasing.views_of(info, [objects[i] for i in ins.instr_args.args[: len(info.params)]])
        if views is not None:
            tried += 1
            assert not aliaser.try_alias(pc, ins.instr_args, info, views)
    assert tried >= 2


@pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch (the interop oracle) is not installed")
def test_executorch_built_program_bit_identical(monkeypatch, tmp_path: Path):
    model, x = Recurrent().eval(), torch.randn(1, 5, 6)
    pte = executorch_pte(model, (x,), tmp_path / "recurrent.pte")
    got = Program.load(pte).load_method()(x.numpy())
    _same(got, _plain(monkeypatch, pte.read_bytes(), [x.numpy()]))


class Square(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x * x)


def test_fast_steps_keep_floating_point_warnings_off():
    method = Program.from_bytes(compile_module(Square(), (torch.ones(4),)).pte).load_method()
    assert method.quiet
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning would fail the call
        (out,) = method(np.full(4, -1e30, np.float32))
    assert (out == 1).all()


class CacheSnapshot(torch.nn.Module):
    """A copy of a cache's slice taken before `llama::update_cache` writes the cache in place, read after it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 4, 1, 2))

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        before = self.cache[:, 1:3].clone().reshape(-1)
        torch.ops.llama.update_cache(value, self.cache, 1)
        return before * 2 + self.cache[:, 1:3].reshape(-1)


def test_a_copy_of_state_a_kernel_writes_in_place_stays_a_copy():
    """update_cache writes its cache argument (its `mutates`): a layout copy of the cache read after it must not
    become a view of the cache (it would see the new values)."""
    from etbuild.llm import custom_ops

    custom_ops.define()
    value = torch.ones(1, 2, 1, 2)
    method = Program.from_bytes(compile_module(CacheSnapshot(), (value,)).pte).load_method()
    eager = CacheSnapshot()
    for scale in (1, 3):  # the second call reads the cache the first one wrote
        with torch.no_grad():
            expected = eager(value * scale).numpy()
        np.testing.assert_array_equal(method((value * scale).numpy())[0], expected)
