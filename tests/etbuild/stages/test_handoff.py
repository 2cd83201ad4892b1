"""The export → lower handoff: the saved object once, the file otherwise, the same lowered bytes either way; every
file loads in a fresh process, with the operator libraries its graph calls registered first."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from etbuild.errors import StageError
from etbuild.llm import custom_ops
from etbuild.stages import handoff
from etbuild.stages.lower import lower

REPO = Path(__file__).resolve().parents[3]


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


def _fresh_load(path: Path, *, plain: bool = False, pythonpath: str = "") -> subprocess.CompletedProcess[str]:
    """Load `path` in a new Python process (`handoff.read`, or `torch.export.load` with `plain`)."""
    call = f"torch.export.load({str(path)!r})" if plain else f"handoff.read(Path({str(path)!r}))"
    script = "\n".join(["import torch", "from pathlib import Path", "from etbuild.stages import handoff",
                        f"ep = {call}", "print(len(ep.graph.nodes))"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (pythonpath, str(REPO)) if p)}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)


class Cached(torch.nn.Module):
    """A cache written with `llama::update_cache`, as `llm.attention: custom` programs write theirs."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 8, 2, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.ops.llama.update_cache(x, self.cache, 0)
        return self.cache.sum() + x.sum()


def test_a_program_calling_llama_operators_loads_in_a_fresh_process(tmp_path):
    custom_ops.define()
    ep = torch.export.export(Cached(), (torch.ones(1, 2, 2, 4),), strict=False)
    path = tmp_path / "forward.pt2"
    handoff.write(ep, path)
    assert handoff.recorded_libraries(path) == {"llama": "etbuild.llm.custom_ops:define"}
    assert _fresh_load(path, plain=True).returncode != 0  # torch alone cannot: the operators are not registered
    done = _fresh_load(path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) == len(ep.graph.nodes)


OWN_LIBRARY = '''
import torch

LIBRARY = torch.library.Library("etbuild_test_ops", "DEF")
LIBRARY.define("twice(Tensor x) -> Tensor")
LIBRARY.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")
'''


def test_a_model_s_own_operator_library_is_recorded_by_its_module_and_imported_to_load(tmp_path, monkeypatch):
    (tmp_path / "own_ops_for_handoff.py").write_text(OWN_LIBRARY)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("own_ops_for_handoff")

    class Twice(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.etbuild_test_ops.twice(x) + 1

    path = tmp_path / "forward.pt2"
    handoff.write(torch.export.export(Twice(), (torch.ones(3),), strict=False), path)
    assert handoff.recorded_libraries(path) == {"etbuild_test_ops": "own_ops_for_handoff"}
    done = _fresh_load(path, pythonpath=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_file_that_does_not_load_is_a_stage_error_naming_it(tmp_path):
    path = tmp_path / "forward.pt2"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("forward/archive_format", "pt2")
    with pytest.raises(StageError, match=f"{path}: cannot load the saved program"):
        handoff.read(path)
