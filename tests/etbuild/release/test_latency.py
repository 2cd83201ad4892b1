"""etbuild.release.latency: timing a product in its trimmed runtime alone (the timing itself runs in
test_release.py's release build; here, the failure a runtime that cannot run it gives)."""

from __future__ import annotations

from pathlib import Path

import pytest

from etbuild.errors import VerificationError
from etbuild.release.config import load_release
from etbuild.release.latency import measure_latency


def test_a_runtime_that_cannot_time_the_product_is_a_verification_error(release_file: Path, tmp_path: Path) -> None:
    recipe = load_release(release_file).product("tiny-a").recipe
    empty = tmp_path / "runtime"
    empty.mkdir()
    with pytest.raises(VerificationError) as err:
        measure_latency(recipe, tmp_path / "tiny-a.pte", empty, calls=1)
    message = str(err.value)
    assert message.startswith("tiny-a.pte could not be timed on runtime: ")
    assert "Error" in message.splitlines()[-1]  # the last lines of the isolated process's traceback
