"""etbuild.lowering.listing: the readable text of each lowering form (what `--dump-after` writes)."""

from __future__ import annotations

import torch

from etbuild.lowering.listing import listing
from etbuild.stages.lower import lower


def _forms(module: torch.nn.Module, *inputs: torch.Tensor) -> dict[str, str]:
    texts: dict[str, str] = {}
    exported = torch.export.export(module.eval(), inputs)
    lower({"forward": exported}, lambda step, form: texts.update({step.name: listing(form)}))
    return texts


def test_graph_forms_are_fx_code_with_the_folded_constants_named():
    torch.manual_seed(0)
    texts = _forms(torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU()), torch.randn(2, 6))
    assert texts["decompose"].startswith("# method forward: 0 node(s) folded to constants at build time\n"
                                         "class GraphModule(torch.nn.Module):\n")
    folded = texts["fold-constants"]
    assert folded.startswith("# method forward: 1 node(s) folded to constants at build time\n"
                             "#   permute: float32[6, 4]\nclass GraphModule(torch.nn.Module):\n")
    assert 'addmm: "f32[2, 4]" = torch.ops.aten.addmm.default(p_0_bias, input_1, permute)' in folded


def test_the_program_form_lists_values_and_instructions_with_their_source():
    torch.manual_seed(0)
    text = _forms(torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU()), torch.randn(2, 6))["to-program"]
    assert text == "\n".join([
        "method forward: 2 instructions, inputs v0, outputs v5",
        "  values:",
        "    v0    tensor float32[2, 6]",
        "    v1    tensor float32[4] constant 1",
        "    v2    tensor float32[6, 4] constant 2",
        "    v3    Int 1",
        "    v4    tensor float32[2, 4]",
        "    v5    tensor float32[2, 4]",
        "  instructions:",
        "    0     aten::addmm.out(v1, v0, v2, v3, v3, v4) -> v4    from 0 (Linear) at "
        "torch/nn/modules/linear.py:134: return F.linear(input, self.weight, self.bias)",
        "    1     aten::relu.out(v4, v5) -> v5    from 1 (ReLU) at "
        "torch/nn/modules/activation.py:143: return F.relu(input, inplace=self.inplace)",
    ])


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1)
        return torch.cond(x.sum() > 0, lambda x: x + self.count, lambda x: x - self.count, (x,))


def test_the_program_form_shows_control_flow_and_mutable_state():
    text = _forms(Counter(), torch.randn(3))["to-program"]
    assert "tensor float32[1] mutable count (zeros)" in text  # a zero initial state is not stored
    assert "jump to " in text and "move v" in text
