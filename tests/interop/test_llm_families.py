"""Every architecture `model.llm` takes builds end to end and gives Hugging Face's 32 greedy tokens in our
runtime and ExecuTorch's (verify's own token check, `verify.json` `llm`)."""

from __future__ import annotations

import io
import json

import pytest

from etbuild.build.driver import build
from tests.conftest import HAS_EXECUTORCH
from tests.llm_support import FAMILIES, write_llm_recipe

pytestmark = [pytest.mark.interop, pytest.mark.slow,
              pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_builds_and_gives_hugging_face_tokens(tmp_path, family):
    recipe = write_llm_recipe(tmp_path, family, {"config": FAMILIES[family], "max_context": 64, "max_prefill": 8})
    result = build([recipe], tmp_path / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    report = json.loads((tmp_path / "build" / family / "verify.json").read_text())["llm"]
    assert (report["matched"], report["executorch"]["matched"]) == (32, 32)


def test_gemma_with_xnnpack_is_delegated_as_llama_is(tmp_path):
    """Gemma's tanh GELU runs in the delegates (eight XNNPACK nodes), so its forward splits as Llama's does."""
    reports = {}
    for family in ("gemma", "llama3"):
        recipe = write_llm_recipe(tmp_path, family, {"config": FAMILIES[family], "max_context": 64, "max_prefill": 8},
                                  llm={"attention": "custom"}, backends=[{"name": "xnnpack"}])
        result = build([recipe], tmp_path / "build", stream=io.StringIO())
        assert result.exit_code == 0, result.failed
        report = json.loads((tmp_path / "build" / family / "verify.json").read_text())["llm"]
        assert (report["matched"], report["executorch"]["matched"]) == (32, 32)
        reports[family] = json.loads((tmp_path / "build" / family / "partition.json").read_text())["methods"]["forward"]
    assert reports["gemma"]["delegates"] == reports["llama3"]["delegates"]
    assert not any(o["operator"].startswith("aten::gelu") for o in reports["gemma"]["outside"])
