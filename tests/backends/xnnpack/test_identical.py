"""Identical nodes bound once (compile.distinct_nodes): a node repeating an earlier one (same kind, inputs and
parameters) is dropped and its readers read the earlier output; against torch, against the graph with every node
bound, and against ExecuTorch's runtime on three 8da4w linears of one input lowered by ExecuTorch."""

from __future__ import annotations

import numpy as np
import pytest

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.blob import read_blob
from etbuild.backends.xnnpack.runtime import chains
from etbuild.backends.xnnpack.runtime import compile as compile_module
from tests.backends.xnnpack.graphs import GraphBuilder
from tests.conftest import HAS_EXECUTORCH

torch = pytest.importorskip("torch")
IN, OUT = g.FLAG_EXTERNAL_INPUT, g.FLAG_EXTERNAL_OUTPUT
F = np.float32


@pytest.fixture(autouse=True)
def _node_by_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each node its own step (runs of elementwise nodes are not joined, chains.py): the tests count nodes bound."""
    monkeypatch.setattr(chains, "module", lambda: None)


def _every_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_module, "distinct_nodes", lambda xnodes, values: list(enumerate(xnodes)))


def _chain(second_external: bool) -> GraphBuilder:
    """x → Sigmoid twice → Tanh of each → Multiply of the two (→ out); the second Sigmoid's output external
    when asked."""
    gb = GraphBuilder()
    x = gb.tensor((3, 8), flags=IN)
    s1, s2 = gb.tensor((3, 8)), gb.tensor((3, 8), flags=OUT if second_external else 0)
    t1, t2, out = gb.tensor((3, 8)), gb.tensor((3, 8)), gb.tensor((3, 8), flags=OUT)
    gb.node("Sigmoid", input_id=x, output_id=s1, flags=0)
    gb.node("Sigmoid", input_id=x, output_id=s2, flags=0)
    gb.node("Tanh", input_id=s1, output_id=t1, flags=0)
    gb.node("Tanh", input_id=s2, output_id=t2, flags=0)  # a repeat once s2 reads as s1
    gb.node("Multiply", input1_id=t1, input2_id=t2, output_id=out, flags=0)
    return gb


def _run(gb: GraphBuilder, x: np.ndarray, outputs: int) -> tuple[list[np.ndarray], int]:
    handle = gb.handle()
    outs = [np.full((3, 8), np.nan, F) for _ in range(outputs)]
    handle.execute([x, *outs])
    return outs, len(handle.steps)


def test_repeats_are_bound_once_and_give_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(F)
    (merged,), steps = _run(_chain(False), x, 1)
    assert steps == 3  # Sigmoid, Tanh, Multiply: the repeated Sigmoid and the Tanh reading it are gone
    t = torch.tanh(torch.sigmoid(torch.from_numpy(x)))
    np.testing.assert_allclose(merged, (t * t).numpy(), rtol=1e-6, atol=1e-6)
    _every_node(monkeypatch)
    (every,), steps = _run(_chain(False), x, 1)
    assert steps == 5
    assert np.array_equal(merged, every)


def test_a_repeat_whose_output_is_external_is_kept() -> None:
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(F)
    (second, out), steps = _run(_chain(True), x, 2)
    assert steps == 5
    # (XNNPACK's sigmoid bits where the runtime has them, backends/xnnpack/runtime/exact.py: within 2 ulp of torch's)
    np.testing.assert_allclose(second, torch.sigmoid(torch.from_numpy(x)).numpy(), rtol=3e-7, atol=3e-7)
    assert np.isfinite(out).all()


def test_other_parameters_or_clamps_are_not_repeats() -> None:
    """Two Clamps of one input with different bounds, two Adds of swapped inputs: all four nodes bound."""
    gb = GraphBuilder()
    x, y = gb.tensor((2, 4), flags=IN), gb.tensor((2, 4), flags=IN)
    a, b, c, d = (gb.tensor((2, 4)) for _ in range(4))
    o1, o2 = gb.tensor((2, 4), flags=OUT), gb.tensor((2, 4), flags=OUT)
    gb.node("Clamp", clamp=(-0.5, 0.5), input_id=x, output_id=a, flags=0)
    gb.node("Clamp", clamp=(-1.0, 1.0), input_id=x, output_id=b, flags=0)
    gb.node("Subtract", input1_id=x, input2_id=y, output_id=c, flags=0)
    gb.node("Subtract", input1_id=y, input2_id=x, output_id=d, flags=0)
    gb.node("Add", input1_id=a, input2_id=b, output_id=o1, flags=0)
    gb.node("Add", input1_id=c, input2_id=d, output_id=o2, flags=0)
    rng = np.random.default_rng(2)
    xs, ys = (rng.standard_normal((2, 4)).astype(F) * 2 for _ in range(2))
    handle = gb.handle()
    out1, out2 = np.empty((2, 4), F), np.empty((2, 4), F)
    handle.execute([xs, ys, out1, out2])
    assert len(handle.steps) == 6
    np.testing.assert_allclose(out1, np.clip(xs, -0.5, 0.5) + np.clip(xs, -1, 1), rtol=1e-6)
    np.testing.assert_allclose(out2, (xs - ys) + (ys - xs), atol=1e-6)


class _ThreeProducts(torch.nn.Module):
    """One row through three linears (q, k, v), their outputs concatenated: one Convert each in the delegate."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = torch.nn.Linear(128, 64), torch.nn.Linear(128, 32), torch.nn.Linear(128, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.q(x), self.k(x), self.v(x)], dim=-1)


@pytest.mark.interop
@pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")
def test_three_8da4w_products_of_one_row_quantize_it_once(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ExecuTorch's lowering quantizes the row once per product (three Converts); we bind one, and the outputs
    equal ExecuTorch's runtime's and those of the graph with every node bound, bit for bit."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    from etbuild.runtime import Program
    from etbuild.runtime.format.pte import read_program, segment_bytes

    torch.manual_seed(0)
    model = _ThreeProducts().eval()
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))
    exported = torch.export.export(model, (torch.randn(1, 128),))
    data = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    path = tmp_path / "qkv.pte"
    path.write_bytes(data)
    program, header = read_program(data)
    blobs = [segment_bytes(data, program, header, d.processed.index) for d in program.execution_plan[0].delegates]
    converts = sum(type(n.node).__name__ == "Convert" for b in blobs for n in read_blob(b).graph.xnodes)
    assert converts >= 3

    theirs = Runtime.get().load_program(str(path)).load_method("forward")
    ours = Program.load(path).load_method("forward")
    _every_node(monkeypatch)
    every = Program.load(path).load_method("forward")
    rng = np.random.default_rng(5)
    for scale in (0.1, 1.0, 30.0):
        x = (rng.standard_normal((1, 128)) * scale).astype(F)
        got = np.asarray(ours(x)[0]).copy()
        np.testing.assert_array_equal(got, theirs.execute([torch.from_numpy(x)])[0].numpy())
        np.testing.assert_array_equal(got, np.asarray(every(x)[0]))
    ours_steps = sum(len(d.steps) for d in _delegates(ours))
    every_steps = sum(len(d.steps) for d in _delegates(every))
    assert ours_steps <= every_steps - (converts - 1)


def _delegates(method: object) -> list:
    from etbuild.backends.xnnpack.runtime.delegate import XnnpackDelegate

    return [h for h in method.delegates.values() if isinstance(h, XnnpackDelegate)]  # type: ignore[attr-defined]
