"""`etbuild run` and `etbuild inspect` on bad input: one line, the right exit code, nothing raw on the terminal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from etbuild.cli import main
from etbuild.errors import printable
from etbuild.runtime.format import program as fb
from tests.fuzz.mutators import edited


@pytest.fixture()
def run(small_mlp_pte, tmp_path, capsys):
    """`etbuild run small_mlp.pte --inputs FILE …`: (exit code, stderr)."""

    def run_with(inputs: Path, *extra: str, pte: Path = small_mlp_pte) -> tuple[int, str]:
        code = main(["run", str(pte), "--inputs", str(inputs), "--out", str(tmp_path / "out.npz"), *extra])
        return code, capsys.readouterr().err

    return run_with


def test_object_arrays_are_bad_input(run, tmp_path):
    inputs = tmp_path / "objects.npz"
    np.savez(inputs, in0=np.array([{"a": 1}], dtype=object))
    reason = "Object arrays cannot be loaded when allow_pickle=False"
    assert run(inputs) == (6, f"error: {inputs}: not an .npz file of plain arrays ({reason})\n")


@pytest.mark.parametrize("content", [b"", b"garbage" * 20, b"PK\x03\x04 truncated zip"])
def test_garbage_is_bad_input(run, tmp_path, content):
    inputs = tmp_path / "garbage.npz"
    inputs.write_bytes(content)
    assert run(inputs) == (6, f"error: {inputs}: not an .npz file (a zip archive of .npy arrays)\n")


def test_a_single_array_is_bad_input(run, tmp_path):
    inputs = tmp_path / "one.npy"
    np.save(inputs, np.zeros((2, 16), np.float32))
    assert run(inputs) == (6, f"error: {inputs}: expected an .npz file of arrays, found a single array\n")


def test_the_planned_memory_limit_is_a_flag(run, tmp_path, small_mlp_pte):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, in0=np.zeros((2, 16), np.float32))
    code, err = run(inputs, "--max-planned-bytes", "64B")
    assert code == 5
    assert err.startswith(f"error: {small_mlp_pte}: method 'forward': its planned memory, ")
    assert err.endswith(" bytes, exceeds max_planned_bytes (64)\n")
    assert run(inputs, "--max-planned-bytes", "1MiB") == (0, "")


def test_a_program_without_memory_plan_is_an_invalid_program(run, tmp_path, small_mlp_pte):
    """Issue 14: `etbuild run build/<r>/lowered.pte` died with an AttributeError mid-run."""

    def unplan(program):
        for ev in program.execution_plan[0].values:
            if isinstance(ev.val, fb.Tensor):
                ev.val.allocation_info = None

    pte = tmp_path / "unplanned.pte"
    pte.write_bytes(edited(small_mlp_pte.read_bytes(), unplan))
    inputs = tmp_path / "in.npz"
    np.savez(inputs, in0=np.zeros((2, 16), np.float32))
    code, err = run(inputs, pte=pte)
    assert code == 5
    assert err.startswith(f"error: {pte}: method 'forward': instruction 0: tensor value ")
    assert err.endswith(" has no memory plan (no allocation_info, no data_buffer_idx), which only method inputs "
                        "and outputs may lack\n")


def test_inspect_escapes_what_a_terminal_would_run(small_mlp_pte, tmp_path, capsys):
    def rename(program):
        program.execution_plan[0].name = "forward\x1b[2J\x1b]0;pwned\x07"
        program.execution_plan[0].operators[0].name = "aten::addmm\u202e"

    pte = tmp_path / "evil.pte"
    pte.write_bytes(edited(small_mlp_pte.read_bytes(), rename))
    assert main(["inspect", str(pte)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "method forward\\x1b[2J\\x1b]0;pwned\\x07: " in out
    assert "aten::addmm\\u202e.out" in out


def test_error_messages_escape_names_from_the_file(small_mlp_pte, tmp_path, capsys):
    def rename(program):
        program.execution_plan[0].operators[0].name = "aten::\x1b[31mnope"

    pte = tmp_path / "evil.pte"
    pte.write_bytes(edited(small_mlp_pte.read_bytes(), rename))
    inputs = tmp_path / "in.npz"
    np.savez(inputs, in0=np.zeros((2, 16), np.float32))
    assert main(["run", str(pte), "--inputs", str(inputs), "--out", str(tmp_path / "o.npz")]) == 5
    assert "operator aten::\\x1b[31mnope.out has no kernel in this runtime" in capsys.readouterr().err


def test_printable_keeps_text_and_escapes_controls():
    assert printable("naïve ✓ name") == "naïve ✓ name"
    assert printable("a\nb\x1b[0m\t\u200f") == "a\\nb\\x1b[0m\\t\\u200f"
    assert printable("a\nb", keep="\n") == "a\nb"
