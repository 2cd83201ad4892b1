"""Program.load / load_method / Method.__call__ on real programs."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from etbuild.errors import InvalidProgram, MethodInputError
from etbuild.runtime import Program
from etbuild.runtime.program import default_max_planned_bytes
from tests.fuzz.mutators import edited


def test_runs_like_eager(small_mlp, small_mlp_pte):
    model, (x,) = small_mlp
    method = Program.load(small_mlp_pte).load_method("forward")
    (out,) = method(x.numpy())
    np.testing.assert_allclose(out, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_outputs_are_copies_not_views_of_the_arena(small_mlp, small_mlp_pte):
    _, (x,) = small_mlp
    method = Program.load(small_mlp_pte).load_method()
    first = method(x.numpy())[0]
    method(np.zeros_like(x.numpy()))
    assert not np.shares_memory(first, method.arenas[0])
    np.testing.assert_array_equal(first, method(x.numpy())[0])


def test_constants_are_zero_copy_views_of_the_file(small_mlp_pte):
    method = Program.load(small_mlp_pte).load_method()
    consts = [v for v, ev in zip(method.values.objects, method.plan.values)
              if isinstance(v, np.ndarray) and ev.val.allocation_info is None]
    assert consts and all(not c.flags.writeable and not c.flags.owndata for c in consts)


def test_static_program_binds_every_step_ahead(small_mlp_pte):
    import functools

    method = Program.load(small_mlp_pte).load_method()
    assert method.straight
    # Every step was bound at load: a partial of the kernel, or the kernel's fast path; none reads
    # its arguments from the live value list per call.
    assert all(isinstance(step, functools.partial) or "Binder" not in step.__qualname__ for step in method.steps)
    assert any(isinstance(step, functools.partial) and step.func is np.maximum for step in method.steps)  # relu


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ((), "method 'forward' takes 1 inputs, got 0"),
        ((np.zeros((2, 16), np.float64),), "input 0: expected dtype float32, got float64"),
        ((np.zeros((3, 16), np.float32),), "input 0: expected shape [2, 16], got [3, 16]"),
        (("x",), "input 0: expected a float32 array, got str"),
    ],
)
def test_bad_inputs_get_clear_errors(small_mlp_pte, inputs, message):
    method = Program.load(small_mlp_pte).load_method()
    with pytest.raises(MethodInputError) as err:
        method(*inputs)
    assert str(err.value) == message


def test_unknown_method_names_the_methods(small_mlp_pte):
    with pytest.raises(MethodInputError, match="no method 'decode'; methods: forward"):
        Program.load(small_mlp_pte).load_method("decode")


def test_caller_buffers_are_used_and_checked(small_mlp, small_mlp_pte):
    _, (x,) = small_mlp
    program = Program.load(small_mlp_pte)
    size = program.plan("forward").non_const_buffer_sizes[1]
    arena = np.zeros(size, np.uint8)
    method = program.load_method(buffers=[arena])
    method(x.numpy())
    assert arena.any()
    with pytest.raises(MethodInputError, match=f"memory id 1 holds 8 bytes; the plan needs {size}"):
        program.load_method(buffers=[np.zeros(8, np.uint8)])


def test_runtime_imports_and_runs_without_torch(small_mlp, small_mlp_pte, tmp_path):
    _, (x,) = small_mlp
    np.savez(tmp_path / "in.npz", in0=x.numpy())
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from etbuild.cli import main\n"
        f"sys.exit(main(['run', {str(small_mlp_pte)!r}, '--inputs', {str(tmp_path / 'in.npz')!r}, "
        f"'--out', {str(tmp_path / 'out.npz')!r}, '--calls', '2']))\n"
        "import etbuild.runtime, etbuild.runtime.kernel_registry\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        assert sorted(out.files) == ["call0_out0", "call1_out0"]
        np.testing.assert_array_equal(out["call0_out0"], out["call1_out0"])


def _sized(pte: bytes, size: int) -> bytes:
    def edit(program):
        program.execution_plan[0].non_const_buffer_sizes = [0, size]

    return edited(pte, edit)


def test_default_memory_limit_is_a_quarter_of_the_machine(small_mlp_pte):
    quarter = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    assert default_max_planned_bytes() == quarter
    with pytest.raises(InvalidProgram) as err:
        Program.from_bytes(_sized(small_mlp_pte.read_bytes(), 1 << 50)).load_method()
    assert str(err.value) == (
        f"<bytes>: method 'forward': its planned memory, {1 << 50} bytes, exceeds max_planned_bytes ({quarter})"
    )


def test_a_4_gib_arena_on_a_small_machine_is_an_invalid_program(small_mlp_pte, monkeypatch):
    """The issue's case: a 2 MB file asks for a 4 GiB arena (non_const_buffer_sizes[1] = 2^32); on a
    machine of 8 GiB the default cap is 2 GiB, and loading is refused before allocating anything."""
    machine = {"SC_PHYS_PAGES": 2 << 20, "SC_PAGE_SIZE": 4096}  # 8 GiB
    monkeypatch.setattr(os, "sysconf", machine.__getitem__)
    with pytest.raises(InvalidProgram) as err:
        Program.from_bytes(_sized(small_mlp_pte.read_bytes(), 1 << 32)).load_method()
    assert str(err.value) == (
        f"<bytes>: method 'forward': its planned memory, {1 << 32} bytes, exceeds max_planned_bytes ({2 << 30})"
    )


def test_the_caller_sets_the_memory_limit(small_mlp_pte):
    program = Program.load(small_mlp_pte)
    needed = sum(program.plan("forward").non_const_buffer_sizes)
    with pytest.raises(InvalidProgram, match=rf"its planned memory, {needed} bytes, exceeds max_planned_bytes \(64\)"):
        program.load_method(max_planned_bytes=64)
    program.load_method(max_planned_bytes=needed)


def test_memory_that_cannot_be_allocated_is_an_invalid_program(small_mlp_pte):
    program = Program.from_bytes(_sized(small_mlp_pte.read_bytes(), 1 << 62))
    with pytest.raises(InvalidProgram) as err:
        program.load_method(max_planned_bytes=1 << 63)
    assert str(err.value) == "<bytes>: method 'forward': its planned memory could not be allocated"
