"""A release of an Ethos-U product (slow: it builds through Vela and simulates the NPU on the runtimes): the shipped
`.pte` without its TOSA graph, which the release keeps in a development `.ptd`; SRAM and flash figures; budgets."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from etbuild.errors import ReleaseError
from etbuild.release import make_release
from etbuild.release.simulation import development_file, simulation_bytes

RECIPE = """\
name: tiny-npu
model:
  factory: etbuild.zoo:kws_cnn
  kwargs: {features: 8, channels: [8], num_classes: 3}
  inputs: [{shape: [1, 8, 20], dtype: float32}]
quantize: {scheme: int8-static, calibration: {samples: 4, seed: 0}}
backends: [{name: ethos-u, options: {target: ethos-u55-128}}]
memory: {levels: [{name: sram, bytes: 64KiB}, {name: dram}]}
verify: {samples: 2}
"""
RELEASE = """\
name: mcu
version: 1.0.0
products:
  - recipe: ../recipes/tiny-npu.yaml
    budget: {sram_bytes: 64KiB, flash_bytes: 1MiB}
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    pytest.importorskip("tosa_reference_model")
    pytest.importorskip("ethosu.vela")
    root = tmp_path_factory.mktemp("mcu")
    (root / "recipes").mkdir()
    (root / "releases").mkdir()
    (root / "recipes" / "tiny-npu.yaml").write_text(RECIPE)
    (root / "releases" / "mcu.yaml").write_text(RELEASE)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "-C", str(root)]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "mcu"], check=True)
    return root


@pytest.mark.slow
def test_an_ethos_u_release_ships_without_its_tosa_graph_and_checks_sram_and_flash(project: Path) -> None:
    build, release = project / "build", project / "releases" / "mcu.yaml"
    made = make_release(release, dist_root=project / "dist", build_root=build, stream=io.StringIO())
    built = (build / "tiny-npu" / "tiny-npu.pte").read_bytes()
    shipped = (made.dist / "products" / "tiny-npu" / "tiny-npu.pte").read_bytes()
    dropped = simulation_bytes(built)
    assert dropped > 0 and simulation_bytes(shipped) == 0 and len(shipped) < len(built) - dropped + 64
    assert development_file(build, "mcu", "tiny-npu").is_file()
    assert not any("simulation" in name for name in made.sums)  # the development file is not shipped
    entry = json.loads((made.dist / "release.json").read_text())["products"]["tiny-npu"]
    assert entry["simulation_data"] == {"kept_bytes": 0, "dropped_bytes": dropped}
    assert entry["memory"]["flash_bytes"] == len(shipped) and entry["memory"]["sram_bytes"] > 0
    assert json.loads((made.dist / "products/tiny-npu/verify-all.json").read_text())["passed"]

    sram = entry["memory"]["sram_bytes"]
    release.write_text(RELEASE.replace("sram_bytes: 64KiB", f"sram_bytes: {sram - 1}").replace(
        "budget:", "simulation_data: keep\n    budget:"))
    with pytest.raises(ReleaseError) as err:
        make_release(release, dist_root=project / "dist2", build_root=build, stream=io.StringIO())
    message = str(err.value)
    assert message.startswith(f"release mcu-1.0.0: over budget: product tiny-npu: sram_bytes {sram:,} > budget "
                              f"{sram - 1:,} (CPU arenas in level sram ")
    assert " + ethos-u delegate 0 of method forward " in message and "flash_bytes" not in message
    assert not (project / "dist2" / "mcu-1.0.0").exists()  # no release directory is left
