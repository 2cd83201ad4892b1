"""Mutated `.bpte` files and ETDumps: every one is read (and a bundle verified, an ETDump shown)
or refused with an etbuild error, fast: no other exception, no hang, no unbounded allocation.

A small seeded campaign per format (the program fuzz tier, tests/fuzz, covers the `.pte`
inside a bundle): bytes overwritten, flipped, cut or repeated at random places."""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import pytest

from etbuild.devtools import bundle_format as bf
from etbuild.devtools import etdump_format as ed
from etbuild.devtools.bundle_verify import verify_bundle
from etbuild.devtools.instrument import generated_inputs
from etbuild.errors import EtbuildError
from etbuild.runtime import Program
from etbuild.tools.etdump_profile import from_etdump, to_etdump
from etbuild.tools.profile import profile_method

MUTANTS = 150
SLOWEST_S = 1.0


def mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    kind = rng.randrange(4)
    at = rng.randrange(len(out))
    if kind == 0:  # overwrite a few bytes
        for i in range(at, min(at + rng.randint(1, 4), len(out))):
            out[i] = rng.randrange(256)
    elif kind == 1:  # an offset or length made huge
        out[at:at + 4] = rng.choice([b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"\xfc\xff\xff\xff"])
    elif kind == 2:  # cut
        del out[at:]
    else:  # a slice repeated
        out[at:at] = out[at:at + rng.randint(1, 64)]
    return bytes(out)


def _campaign(data: bytes, check, tmp_path: Path) -> dict[str, int]:
    rng = random.Random(0)
    outcomes = {"read": 0, "refused": 0}
    for k in range(MUTANTS):
        path = tmp_path / f"m{k}"
        path.write_bytes(mutate(data, rng))
        start = time.perf_counter()
        try:
            check(path)
            outcomes["read"] += 1
        except EtbuildError:
            outcomes["refused"] += 1
        assert time.perf_counter() - start < SLOWEST_S, f"mutant {k} took too long"
        path.unlink()
    return outcomes


def test_mutated_bundles(small_mlp, small_mlp_pte, tmp_path) -> None:
    model, (x,) = small_mlp
    data = bf.write_bundle(small_mlp_pte.read_bytes(), {"forward": [([x.numpy()], [model(x).detach().numpy()])]})
    outcomes = _campaign(data, lambda p: verify_bundle(p, max_planned_bytes=1 << 26), tmp_path)
    assert outcomes["refused"] > MUTANTS // 4 and sum(outcomes.values()) == MUTANTS


def test_mutated_etdumps(small_mlp_pte, tmp_path) -> None:
    method = Program.load(small_mlp_pte).load_method("forward")
    data = ed.write_etdump(to_etdump(profile_method(method, generated_inputs(method), 2), method.plan))
    outcomes = _campaign(data, lambda p: from_etdump(ed.read_etdump(p.read_bytes(), str(p)), method.plan, str(p)),
                         tmp_path)
    assert outcomes["refused"] > MUTANTS // 4 and sum(outcomes.values()) == MUTANTS


@pytest.mark.parametrize("size", [0, 1, 4, 8, 12])
def test_tiny_files(tmp_path, size: int) -> None:
    data = np.zeros(size, np.uint8).tobytes()
    with pytest.raises(EtbuildError):
        bf.read_bundle(data, "x")
    with pytest.raises(EtbuildError):
        ed.read_etdump(data, "x")


def test_devtools_commands_import_no_torch(small_mlp, small_mlp_pte, tmp_path) -> None:
    """`run x.bpte --verify`, `profile --etdump --intermediates` and `profile --from` work without torch."""
    import subprocess
    import sys

    model, (x,) = small_mlp
    bpte = tmp_path / "m.bpte"
    bpte.write_bytes(bf.write_bundle(small_mlp_pte.read_bytes(), {"forward": [([x.numpy()],
                                                                               [model(x).detach().numpy()])]}))
    dump = tmp_path / "m.etdump"
    commands = [["run", str(bpte), "--verify", "--atol", "1e-5"],
                ["profile", str(small_mlp_pte), "--calls", "1", "--etdump", str(dump), "--intermediates"],
                ["profile", str(small_mlp_pte), "--from", str(dump)]]
    script = "import sys; sys.modules['torch'] = None\nfrom etbuild.cli import main\n" + "".join(
        f"assert main({c!r}) == 0\n" for c in commands) + (
        "assert 'torch' not in {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert dump.exists() and (tmp_path / "m.etdump.debug").exists()
