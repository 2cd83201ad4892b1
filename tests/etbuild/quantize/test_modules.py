"""etbuild.quantize.modules: module paths of graph nodes, and per-module scheme globs."""

from __future__ import annotations

import torch
from torch import nn

from etbuild.quantize.modules import SchemeMap, enclosing, graph_modules, module_path, unmatched_glob
from etbuild.recipe import ModuleOverride


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)) * 2


def exported_graph() -> torch.fx.Graph:
    return torch.export.export(Net(), (torch.randn(1, 4),)).graph


def test_enclosing_lists_the_module_then_its_containers() -> None:
    assert enclosing("a.b.c") == ["a.b.c", "a.b", "a"]
    assert enclosing("") == []


def test_module_paths_of_an_exported_graph() -> None:
    graph = exported_graph()
    paths = {module_path(n) for n in graph.nodes if n.op == "call_function"}
    assert paths == {"encoder.0", "encoder.1", "head", ""}  # the `* 2` runs in the model itself
    assert graph_modules([graph]) == ["encoder", "encoder.0", "encoder.1", "head"]


def test_the_first_matching_glob_wins_and_containers_match() -> None:
    overrides = (ModuleOverride("head*", "float"), ModuleOverride("encoder", "int8-dynamic"),
                 ModuleOverride("*", "int8-weight-only"))
    schemes = SchemeMap("int8-static", overrides)
    assert schemes.for_path("head") == "float"
    assert schemes.for_path("encoder.0") == "int8-dynamic"  # by its container `encoder`
    assert schemes.for_path("other") == "int8-weight-only"
    assert schemes.for_path("") == "int8-static"  # the root has no path a glob can match


def test_scheme_and_observer_each_come_from_the_first_glob_that_sets_them() -> None:
    overrides = (ModuleOverride("encoder.0", observer="mse"), ModuleOverride("encoder", "int8-dynamic"),
                 ModuleOverride("*", observer="histogram"))
    schemes = SchemeMap("int8-static", overrides, observer="percentile")
    assert (schemes.for_path("encoder.0"), schemes._first("encoder.0", "observer")) == ("int8-dynamic", "mse")
    assert schemes._first("encoder.1", "observer") == "histogram"
    root = SchemeMap("int8-static", overrides, observer="percentile")
    assert root._first("", "observer") is None and root.observer == "percentile"  # the root: the recipe's


def test_with_float_puts_exact_paths_first_even_with_glob_characters() -> None:
    schemes = SchemeMap("int8-static", (ModuleOverride("*", "int8-dynamic"),)).with_float(["blocks[0]*"])
    assert schemes.for_path("blocks[0]*") == "float"
    assert schemes.for_path("blocks0x") == "int8-dynamic"  # the literal path is not a glob
    assert schemes.overrides[-1] == ModuleOverride("*", "int8-dynamic")


def test_unmatched_glob_names_the_glob_and_its_near_miss() -> None:
    modules = ["encoder", "encoder.0", "head"]
    assert unmatched_glob((ModuleOverride("enc*", "float"),), modules) is None
    glob, message = unmatched_glob((ModuleOverride("head*", "float"), ModuleOverride("haed", "float")), modules)
    assert glob == "haed"
    assert "matches no module of the model" in message and "head" in message
    assert message.endswith("(its modules: encoder, encoder.0, head)")


def test_unmatched_glob_shows_at_most_twelve_modules() -> None:
    modules = [f"m{i:02}" for i in range(20)]
    _, message = unmatched_glob((ModuleOverride("zzz", "float"),), modules)
    assert message.endswith("m10, m11, ...)")


class Audio(nn.Module):
    """A 1-D convolution over features, then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean(-1))


def _quantized_ops(schemes: SchemeMap) -> set[str]:
    from etbuild.quantize.flow import Plan, quantize

    inputs = (torch.randn(1, 4, 16),)
    converted = quantize(torch.export.export(Audio().eval(), inputs), Plan(schemes), [inputs])
    return {str(u.target) for n in converted.graph.nodes if "dequantize_per_channel" in str(n.target) for u in n.users}


def test_int8_dynamic_leaves_a_1d_convolution_float_unless_a_module_glob_names_it() -> None:
    assert _quantized_ops(SchemeMap("int8-dynamic")) == {"aten.linear.default"}
    named = SchemeMap("int8-dynamic", (ModuleOverride("conv", "int8-dynamic"),))
    assert _quantized_ops(named) == {"aten.linear.default", "aten.conv1d.default"}
    assert _quantized_ops(SchemeMap("int8-static")) == {"aten.linear.default", "aten.conv1d.default"}
