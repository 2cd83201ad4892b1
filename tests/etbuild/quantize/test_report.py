"""etbuild.quantize.report: the pieces of layers.json (constant bytes, schemes per module, layer records)."""

from __future__ import annotations

import math

import torch
from torch import nn

from etbuild.quantize.accuracy import Layer
from etbuild.quantize.flow import Plan
from etbuild.quantize.modules import SchemeMap
from etbuild.quantize.quantizer import Choices
from etbuild.quantize.report import constant_bytes, layer_record, module_schemes
from etbuild.recipe import ModuleOverride


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4, 3))
        self.unused = nn.Parameter(torch.ones(100))
        self.register_buffer("bias", torch.zeros(3, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + self.bias


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


def test_constant_bytes_count_what_the_graph_reads() -> None:
    assert constant_bytes(torch.fx.symbolic_trace(Scaled())) == 4 * 3 * 4 + 3 * 8  # not `unused`


def test_module_schemes_by_module_path() -> None:
    graph = torch.export.export(Net(), (torch.randn(1, 4),)).graph
    plan = Plan(SchemeMap("int8-static", (ModuleOverride("head", "float"),)))
    assert module_schemes(graph.nodes, plan) == {"body": "int8-static", "head": "float"}
    linear = next(n for n in graph.nodes if n.op == "call_function" and "linear" in str(n.target))
    kept = Plan(plan.schemes, choices=Choices(keep_float=frozenset({linear.name})))
    assert module_schemes(graph.nodes, kept) == {"body": "float", "head": "float"}


def test_a_layer_record_rounds_snrs_and_names_the_root() -> None:
    record = layer_record(Layer("linear", "aten.linear.default", "", 31.234, math.inf), "int8-static")
    assert record == {"node": "linear", "op": "aten.linear.default", "module": "<root>", "scheme": "int8-static",
                      "snr_db": 31.23, "own_snr_db": None}
