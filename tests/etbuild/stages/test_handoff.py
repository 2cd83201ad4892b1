"""The export → lower handoff: the saved object once, the file otherwise, the same lowered bytes either way."""

from __future__ import annotations

import os

import pytest
import torch

from etbuild.stages import handoff
from etbuild.stages.lower import lower


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x))).mean((2, 3))


@pytest.fixture
def exported() -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    return torch.export.export(Small().eval(), (torch.randn(1, 3, 8, 8),), strict=False)


def test_the_saved_program_is_handed_over_once_then_read_from_the_file(tmp_path, exported):
    path = tmp_path / "forward.pt2"
    handoff.clear()
    handoff.save(exported, path)
    assert handoff.load(path) is exported
    again = handoff.load(path)
    assert again is not exported
    assert str(again.graph) == str(torch.export.load(str(path)).graph)


def test_a_file_changed_after_the_save_is_read_again(tmp_path, exported):
    path = tmp_path / "forward.pt2"
    handoff.save(exported, path)
    os.utime(path, ns=(1, 1))
    assert handoff.load(path) is not exported
    handoff.save(exported, path)
    handoff.clear()
    assert handoff.load(path) is not exported


def test_lowering_the_handed_program_or_the_file_gives_the_same_bytes(tmp_path, exported):
    path = tmp_path / "forward.pt2"
    handoff.save(exported, path)
    in_memory = lower({"forward": handoff.load(path)})
    from_file = lower({"forward": handoff.load(path)})
    assert in_memory.to_bytes() == from_file.to_bytes()
