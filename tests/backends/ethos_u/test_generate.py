"""`etbuild generate` on a two-method language model whose layers run in Ethos-U delegates (simulated)."""

from __future__ import annotations

import pytest
import torch
from torch import nn


class Prefill(nn.Module):
    """A toy language model: the next token's logits from the last prompt token (embedding on the CPU, the
    linear layer on the NPU)."""

    def __init__(self, emb: nn.Embedding, fc: nn.Linear) -> None:
        super().__init__()
        self.emb, self.fc = emb, fc

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.emb(tokens)[:, -1]))


class Decode(Prefill):
    def forward(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:  # noqa: ARG002 (the contract's pos)
        return self.fc(torch.relu(self.emb(token)[:, -1]))


def test_generate_runs_ethos_u_delegates_and_says_they_are_simulated(tmp_path, capsys) -> None:
    pytest.importorskip("tosa_reference_model")
    pytest.importorskip("ethosu.vela")
    from etbuild.cli import main
    from etbuild.pipeline import compile_exported
    from etbuild.quantize import flow
    from etbuild.quantize.modules import SchemeMap
    from etbuild.quantize.schemes import MODES
    from etbuild.recipe import BackendConfig
    from etbuild.tools.generate import greedy

    torch.manual_seed(0)
    emb, fc = nn.Embedding(16, 8), nn.Linear(8, 16)
    plan = flow.Plan(SchemeMap("int8-static"), True, mode=MODES["npu-int8"])
    calibration = {"prefill": (Prefill(emb, fc), [(torch.tensor([[1, 2, 3, 4]]),), (torch.tensor([[5, 6, 7, 8]]),)]),
                   "decode": (Decode(emb, fc), [(torch.tensor([[3]]), torch.tensor([4])),
                                                (torch.tensor([[9]]), torch.tensor([5]))])}
    exported, converted = {}, {}
    for name, (model, samples) in calibration.items():
        converted[name] = flow.quantize(torch.export.export(model.eval(), samples[0], strict=False), plan, samples)
        exported[name] = flow.reexport(converted[name], samples[0], None)
    compiled = compile_exported(exported, backends=[BackendConfig("ethos-u", {"target": "ethos-u55-128"})])
    path = tmp_path / "toy.pte"
    path.write_bytes(compiled.pte)
    assert main(["generate", str(path), "--prompt", "1,2,3,4", "--tokens", "2"]) == 0
    out, err = capsys.readouterr()
    assert "note: EthosUBackend delegates run as a functional simulation, not NPU timing" in err

    def step(name: str):
        return lambda *args: [converted[name](*(torch.from_numpy(a) for a in args)).detach().numpy()]

    assert [int(t) for t in out.split()] == greedy(step("prefill"), step("decode"), [1, 2, 3, 4], 2, 16)
