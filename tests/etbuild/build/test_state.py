"""Builds under faults: a killed build resumes, a torn state file and leftovers are removed with a
note, two builds of one tree share the work, exit codes follow the error class."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from etbuild.build.driver import build
from etbuild.build.state import STATE_FILE, check_state
from etbuild.cli import main
from etbuild.fsutil import leftover_temporaries, temp_name
from tests.etbuild.build.test_driver import RECIPE, STAGES

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(RECIPE)
    return recipe, tmp_path / "build"


def _cli(recipe: Path, root: Path) -> subprocess.Popen[str]:
    """`etbuild build` of one recipe in a subprocess, from the tests' checkout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "etbuild.cli", "build", str(recipe), "--build-dir", str(root)]
    return subprocess.Popen(cmd, cwd=recipe.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


def test_a_build_killed_after_emit_resumes_without_rerunning_finished_stages(project):
    recipe, root = project
    proc = _cli(recipe, root)
    _wait_for(root / "tiny" / "tiny.pte", proc)  # emit wrote its output: plan's record is committed
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = build([recipe], root, stream=io.StringIO())
    assert resumed.exit_code == 0
    assert not {"export:tiny", "lower:tiny", "plan:tiny"} & set(resumed.executed)
    assert {"select:tiny", "verify:tiny"} <= set(resumed.executed)
    assert leftover_temporaries(root) == []


def test_a_torn_state_file_is_discarded_with_a_note_and_the_build_succeeds(project):
    recipe, root = project
    build([recipe], root, stream=io.StringIO())
    state = root / STATE_FILE
    state.write_bytes(state.read_bytes()[:100] + b"\x00garbage" * 64)
    out = io.StringIO()
    result = build([recipe], root, stream=out)
    assert (result.exit_code, result.executed) == (0, STAGES)
    note = result.notes[0]
    assert note.startswith(f"the build state {state} was unreadable (") and note.endswith(
        "): discarded; every stage checks its outputs again")
    assert out.getvalue().startswith(f"note: {note}\n")
    assert build([recipe], root, stream=io.StringIO()).executed == []


def test_check_state_keeps_a_good_file_and_drops_a_foreign_one(tmp_path):
    assert check_state(tmp_path / "absent") is None
    foreign = tmp_path / "state"
    foreign.write_text("{}")
    assert "unreadable (file is not a database)" in check_state(foreign)
    assert not foreign.exists()


def test_leftover_temporaries_of_a_killed_build_are_removed_with_a_note(project):
    recipe, root = project
    build([recipe], root, stream=io.StringIO())
    file = temp_name(root / "tiny" / "tiny.pte")
    file.write_bytes(b"\x00" * 1024)
    tree = temp_name(root / "tiny" / "runtime" / "etbuild")
    (tree / "runtime").mkdir(parents=True)
    result = build([recipe], root, stream=io.StringIO())
    assert result.executed == [] and leftover_temporaries(root) == []
    assert result.notes == [
        f"removed 2 temporary file(s) an interrupted build left in {root}: "
        f"{file.relative_to(root)}, {tree.relative_to(root)}"
    ]


def test_two_builds_of_one_tree_at_once_do_the_work_once(project):
    recipe, root = project
    first, second = _cli(recipe, root), _cli(recipe, root)
    outs = [p.communicate(timeout=600)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    waited = [o for o in outs if f"note: waiting for another build of {root} (pid " in o]
    assert len(waited) == 1, outs
    ran = [line.split()[0] for o in outs for line in o.splitlines() if line.strip().endswith(" s")]
    assert sorted(ran) == sorted(STAGES)  # each stage ran once, in one of the two builds
    assert waited[0].endswith(f"ok: 1 recipe(s), 0 task(s) run, {len(STAGES)} up to date\n")
    assert build([recipe], root, stream=io.StringIO()).executed == []  # nothing left stale


def test_exit_codes_follow_the_error_class(project, capsys):
    recipe, root = project
    recipe.write_text(RECIPE.replace("dtype: float32", "dtype: int64"))
    assert main(["build", str(recipe), "--build-dir", str(root)]) == 2  # a recipe error in export
    drift = recipe.parent / "drift.py"
    drift.write_text(
        "import torch\n"
        "class Drift(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.calls = 0\n"
        "    def forward(self, x):\n"
        "        self.calls += 1  # Python state: export bakes in the count it saw\n"
        "        return x * self.calls\n"
    )
    recipe.write_text("name: drift\nmodel:\n  factory: drift.py:Drift\n  inputs: [{shape: [3], dtype: float32}]\n"
                      "verify: {samples: 3}\n")
    assert main(["build", str(recipe), "--build-dir", str(root)]) == 4  # verification
    assert "verify:drift" in capsys.readouterr().out


def test_the_checker_records_what_doits_does_and_hashes_an_unchanged_file_once(tmp_path, monkeypatch):
    from doit import dependency

    from etbuild.build.state import MD5Checker

    path = tmp_path / "big.bin"
    path.write_bytes(os.urandom(1 << 16))
    expected = dependency.MD5Checker().get_state(str(path), None)
    hashed = []
    real = dependency.get_file_md5
    monkeypatch.setattr(dependency, "get_file_md5", lambda p: hashed.append(p) or real(p))
    checker = MD5Checker()
    assert MD5Checker.__name__ == dependency.MD5Checker.__name__  # doit records it; old records stay valid
    assert checker.get_state(str(path), None) == expected
    assert checker.get_state(str(path), None) == expected  # a second task reading the same file
    assert checker.get_state(str(path), expected) is None  # doit's shortcut: recorded with this timestamp
    assert len(hashed) == 1
    path.write_bytes(os.urandom(1 << 16))
    os.utime(path, ns=(10**18, 10**18))
    assert checker.get_state(str(path), expected)[2] == real(str(path))
    assert len(hashed) == 2
