"""Steps bound again when their arguments change (etbuild.runtime.steady): a dynamically shaped program gives the
same outputs, bit for bit, as with every call made through its kernel, and matches torch and ExecuTorch's runtime;
in a steady state the kernels are not called again."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.pipeline import compile_module
from etbuild.runtime import Program
from etbuild.runtime.binding import Binder
from etbuild.runtime.steady import Rebinding
from tests.conftest import requires_executorch

SHAPES = (6, 6, 6, 4, 4, 6, 3)  # token counts per call: steady runs, then changes


class Layouts(torch.nn.Module):
    """A view, slices, a select (of a 1-d input too), a squeeze and elementwise calls of a dynamic tensor."""

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        y = (x * 2).view(1, x.shape[1], 4, 4)
        z = y[:, 1:, 2].squeeze(0)
        m = (z * z).mean(-1, keepdim=True)
        return torch.sigmoid(z + m) * 2 - 1 + pos[0]


def _inputs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, n, 16, generator=g), torch.randn(1, generator=g)


def _outputs(data: bytes, steady: bool, monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    with monkeypatch.context() as m:
        if not steady:
            m.setattr(Binder, "_steady_step", lambda *_: None)
        method = Program.from_bytes(data).load_method()
    assert any(isinstance(s, Rebinding) for s in method.steps) == steady
    return [method(*[t.numpy() for t in _inputs(n, k)])[0] for k, n in enumerate(SHAPES)]


def _dynamic() -> dict[int, torch.export.Dim]:
    return {1: torch.export.Dim("n", min=3, max=32)}


def test_our_dynamic_program_is_bit_identical_and_matches_torch(monkeypatch):
    model = Layouts().eval()
    data = compile_module(model, _inputs(6, 0), dynamic_shapes=(_dynamic(), None)).pte
    got = _outputs(data, True, monkeypatch)
    plain = _outputs(data, False, monkeypatch)
    for k, (a, b) in enumerate(zip(got, plain)):
        assert a.shape == b.shape and a.tobytes() == b.tobytes()
        with torch.no_grad():
            np.testing.assert_allclose(a, model(*_inputs(SHAPES[k], k)).numpy(), rtol=1e-6, atol=1e-6)


def test_a_steady_call_runs_no_kernel_and_a_new_shape_binds_again(monkeypatch):
    data = compile_module(Layouts().eval(), _inputs(6, 0), dynamic_shapes=(_dynamic(), None)).pte
    method = Program.from_bytes(data).load_method()
    rebinding = [s for s in method.steps if isinstance(s, Rebinding)]
    for _ in range(2):
        method(*[t.numpy() for t in _inputs(6, 0)])
    bound = [s for s in rebinding if s.bound is not None]
    assert len(bound) >= 6  # the view, slice, select and squeeze copies, the mean and elementwise calls
    settled = [s.binds for s in rebinding]
    calls = []
    for s in bound:
        counted = dataclasses.replace(s.info, fn=lambda *a, _f=s.info.fn: calls.append(1) or _f(*a))
        monkeypatch.setattr(s, "info", counted)
    for _ in range(3):
        method(*[t.numpy() for t in _inputs(6, 1)])
    assert [s.binds for s in rebinding] == settled and not calls  # same shapes: only the bound steps ran
    method(*[t.numpy() for t in _inputs(4, 2)])
    assert all(s.binds == b + 1 for s, b in zip(rebinding, settled))  # new shapes: each bound again, once


@requires_executorch
def test_executorch_program_with_et_view_matches_executorch_runtime(tmp_path: Path, monkeypatch):
    """ExecuTorch's own lowering: et_view (a pure view), unplanned inputs, a select of the 1-d input."""
    from executorch.exir import ExecutorchBackendConfig, to_edge
    from executorch.exir.passes import MemoryPlanningPass

    from etbuild.verify.oracle import executorch_methods

    exported = torch.export.export(Layouts().eval(), _inputs(6, 0), dynamic_shapes=(_dynamic(), None))
    config = ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))
    pte = tmp_path / "layouts.pte"
    pte.write_bytes(to_edge(exported).to_executorch(config).buffer)
    method = Program.load(pte).load_method()
    names = {s.info.name for s in method.steps if isinstance(s, Rebinding)}
    assert {"executorch_prim::et_view.default", "aten::select_copy.int_out"} <= names
    theirs = executorch_methods(pte, "forward")[0]
    got = _outputs(pte.read_bytes(), True, monkeypatch)
    for k, n in enumerate(SHAPES):
        x, pos = (t.numpy() for t in _inputs(n, k))
        kept = x.copy()
        np.testing.assert_allclose(got[k], theirs(x, pos)[0], rtol=1e-6, atol=1e-6)
        method(x, pos)
        assert np.array_equal(x, kept)  # an unplanned input is copied in, the caller's array left alone


class NormLinear(torch.nn.Module):
    """RMSNorm and a linear over tokens `[1, n, 8]`, delegated to XNNPACK whole."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def test_a_delegate_with_dynamic_arguments_is_prepared_once_per_shape(monkeypatch):
    """The delegate's step passes the very tuple of its previous call while the arrays stay the same objects,
    so the handle neither prepares again nor re-checks them. (A new token count prepares twice: once for the
    inputs, once more when the outputs it resized come back as new views.)"""
    from etbuild.backends.xnnpack.runtime.delegate import XnnpackDelegate
    from etbuild.pipeline import compile_exported
    from etbuild.recipe import BackendConfig

    model = NormLinear().eval()
    n = torch.export.Dim("n", min=1, max=16)
    exported = torch.export.export(model, (torch.randn(1, 2, 8),), dynamic_shapes=({1: n},))
    data = compile_exported({"forward": exported}, backends=(BackendConfig("xnnpack", {}),)).pte
    method = Program.from_bytes(data).load_method()
    assert method.delegates
    prepared: list[int] = []
    prepare = XnnpackDelegate._prepare
    monkeypatch.setattr(XnnpackDelegate, "_prepare", lambda self, args: prepared.append(1) or prepare(self, args))
    (handle,) = method.delegates.values()
    counts, passed = [], []
    for count in (3, 3, 3, 3, 5, 5, 5):
        x = torch.randn(1, count, 8)
        with torch.no_grad():
            np.testing.assert_allclose(method(x.numpy())[0], model(x).numpy(), rtol=1e-5, atol=1e-5)
        counts.append(len(prepared))
        passed.append(handle._frozen)
    assert counts == [1, 2, 2, 2, 3, 4, 4]
    assert passed[2] is not None and passed[3] is passed[2] and passed[6] is passed[5]


def _norm_linear_program() -> tuple[torch.nn.Module, bytes]:
    from etbuild.pipeline import compile_exported
    from etbuild.recipe import BackendConfig

    model = NormLinear().eval()
    n = torch.export.Dim("n", min=1, max=16)
    exported = torch.export.export(model, (torch.randn(1, 2, 8),), dynamic_shapes=({1: n},))
    return model, compile_exported({"forward": exported}, backends=(BackendConfig("xnnpack", {}),)).pte


def test_a_steady_delegate_call_runs_only_its_bound_steps(monkeypatch):
    """While the call's arrays stay the same objects the method runs the handle's steady step, not `execute`;
    a new token count executes (and binds) again; outputs are bit for bit those of `execute` on every call."""
    from etbuild.backends.xnnpack.runtime.delegate import XnnpackDelegate
    from etbuild.runtime import binding
    from etbuild.runtime.steady import DelegateCall

    model, data = _norm_linear_program()
    method = Program.from_bytes(data).load_method()
    with monkeypatch.context() as m:  # every call through `execute`, as a delegate called twice is
        full = binding._delegate_step
        m.setattr(binding, "_delegate_step", lambda b, a, w, shared=False: full(b, a, w, True))
        plain = Program.from_bytes(data).load_method()
    (step,) = [s for s in method.steps if isinstance(s, DelegateCall)]
    assert not any(isinstance(s, DelegateCall) for s in plain.steps)
    executed: list[int] = []
    execute = XnnpackDelegate.execute
    monkeypatch.setattr(XnnpackDelegate, "execute", lambda self, args: executed.append(1) or execute(self, args))
    counts = []
    for count in (3, 3, 3, 3, 5, 5, 2):
        x = torch.randn(1, count, 8)
        mark = len(executed)
        got = method(x.numpy())[0]
        counts.append(len(executed) - mark)
        assert got.tobytes() == plain(x.numpy())[0].tobytes()
        with torch.no_grad():
            np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-5)
    assert counts == [1, 1, 0, 0, 1, 1, 1]  # the second call of a count stores nothing new: from the third, bound
    assert step.binds == 5


def test_a_steady_step_takes_no_key_until_a_value_it_watches_changes(monkeypatch):
    """A call of the same shapes gives no value another object, so the bound steps run without computing their
    keys; a store of another object into a value a step reads marks that step dirty: it takes its key once."""
    from etbuild.runtime.steady import DelegateCall

    data = compile_module(Layouts().eval(), _inputs(6, 0), dynamic_shapes=(_dynamic(), None)).pte
    _, linear = _norm_linear_program()
    methods = [(Program.from_bytes(data).load_method(), lambda k: _inputs(6, k)),
               (Program.from_bytes(linear).load_method(), lambda k: (torch.randn(1, 3, 8),))]
    for m, inputs in methods:
        for k in range(3):
            m(*[t.numpy() for t in inputs(k)])
        steps = [s for s in m.steps if isinstance(s, (DelegateCall, Rebinding))]
        keys: list[object] = []
        for s in steps:
            monkeypatch.setattr(s, "key", lambda _k=s.key, _s=s, _seen=keys: _seen.append(_s) or _k())
        x = [t.numpy() for t in inputs(5)]
        want = m(*x)[0]
        assert steps and not keys and not any(s.dirty for s in steps)
        watched = next(i for i, w in m.values.watchers.items() if w)
        store = m.values.setter(watched)
        first = m.values.objects[watched]
        store(first.copy() if isinstance(first, np.ndarray) else first + 1)  # another object
        store(first)
        dirty = [s for s in steps if s.dirty]
        assert dirty == m.values.watchers[watched]
        assert m(*x)[0].tobytes() == want.tobytes() and keys == dirty


class Windows(torch.nn.Module):
    """Two slices of one dynamic tensor that stays alive: the first may be a view of it."""

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        h = x * 2
        return h[:, 1:].squeeze(0) * 3 + h[:, :-1].squeeze(0) * pos[0]


def test_a_dynamic_layout_copy_becomes_a_view_where_the_plan_allows(monkeypatch):
    """The slice's out holds a view of its input (no copy per call) while bound; after two changes in a row (the
    last call) it copies until its arguments hold still. Outputs stay bit for bit those of every call through its
    kernel, across shape changes, and match torch."""
    model = Windows().eval()
    data = compile_module(model, _inputs(6, 0), dynamic_shapes=(_dynamic(), None)).pte
    method = Program.from_bytes(data).load_method()
    viewing = [s for s in method.steps if isinstance(s, Rebinding) and s.may_view]
    assert viewing
    step = viewing[0]
    plain = _outputs(data, False, monkeypatch)
    views = []
    for k, n in enumerate(SHAPES):
        x, pos = _inputs(n, k)
        got = method(x.numpy(), pos.numpy())[0]
        assert got.tobytes() == plain[k].tobytes()
        with torch.no_grad():
            np.testing.assert_allclose(got, model(x, pos).numpy(), rtol=1e-6, atol=1e-6)
        out = method.values.objects[step.arg_idx[-1]]
        views.append(step.viewing and np.shares_memory(out, method.values.objects[step.arg_idx[0]]))
    assert views == [True] * 6 + [False]


def test_arguments_that_change_at_every_call_are_not_bound_until_they_hold_still(monkeypatch):
    """Shapes 6, 4, 3, 3, 3 (the first call is a change too): from the second change in a row the steps stay unbound
    (their kernels run); the next call of the same shape binds them again; outputs bit for bit those of every call
    through its kernel."""
    data = compile_module(Layouts().eval(), _inputs(6, 0), dynamic_shapes=(_dynamic(), None)).pte
    method = Program.from_bytes(data).load_method()
    steps = [s for s in method.steps if isinstance(s, Rebinding) and not s.info.pure]
    shapes = (6, 4, 3, 3, 3)
    with monkeypatch.context() as m:
        m.setattr(Binder, "_steady_step", lambda *_: None)
        plain = Program.from_bytes(data).load_method()
    states = []
    for k, n in enumerate(shapes):
        x = [t.numpy() for t in _inputs(n, k)]
        assert method(*x)[0].tobytes() == plain(*x)[0].tobytes()
        states.append(sum(s.bound is not None or s.viewing for s in steps))
    assert states[1] == states[2] == 0 and states[0] == states[3] == states[4] > 0


@pytest.mark.parametrize("name", ["llama::update_cache.out", "llama::custom_sdpa.out"])
def test_a_moving_position_keeps_the_bound_fast_path_and_is_checked_at_each_call(name: str) -> None:
    """A kernel's `live` number (a KV cache's position) is read by its bound fast path at each call: a decode step
    at the next position runs no kernel call, computes what the kernel computes there, and a position past the
    cache is the kernel's MethodInputError."""
    from etbuild.errors import MethodInputError
    from etbuild.runtime.kernel_registry import load_all

    info = load_all()[name]
    calls = []

    def counted(*args):  # noqa: ANN002, ANN202
        calls.append(args)
        return info.fn(*args)

    counting = dataclasses.replace(info, fn=counted)
    rng = np.random.default_rng(3)
    new, cache = rng.standard_normal((1, 1, 2, 8)).astype(np.float32), np.zeros((1, 6, 2, 8), np.float32)
    if name.startswith("llama::update_cache"):
        objects = [new, cache, 0, np.zeros(1, np.float32)]
        expected = lambda pos: np.concatenate([cache[:, :pos], new, cache[:, pos + 1:]], axis=1)  # noqa: E731
        result = lambda: cache.copy()  # noqa: E731
    else:
        cache[:] = rng.standard_normal(cache.shape)
        query = rng.standard_normal((1, 1, 4, 8)).astype(np.float32)
        objects = [query, cache, cache.copy(), 0, None, 0.0, True, None, np.zeros((1, 1, 4, 8), np.float32)]
        expected = lambda pos: info.fn(*objects[:3], pos, *objects[4:8], np.empty_like(query))  # noqa: E731
        result = lambda: objects[-1].copy()  # noqa: E731
    position = 2 if name.startswith("llama::update_cache") else 3
    step = Rebinding(counting, objects, list(range(len(objects))), info.params, {position}, None, None)
    for pos in (1, 2, 3, 4):
        objects[position] = pos
        before = expected(pos)
        step.dirty = True
        step()
        np.testing.assert_array_equal(result(), before)
    assert len(calls) == 1 and step.bound is not None
    objects[position] = 6
    step.dirty = True
    with pytest.raises(MethodInputError, match="past the KV cache"):
        step()
