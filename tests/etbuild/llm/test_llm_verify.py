"""Verify for quantized language models: next-token agreement with the float model gates the build."""

from __future__ import annotations

import io
import json

import pytest

from etbuild.build.driver import build
from tests.llm_support import TINY, write_llm_recipe


@pytest.mark.slow
def test_8da4w_xnnpack_agreement_is_reported_and_gates_the_build(tmp_path):
    quantize = {"scheme": "int8-dynamic-int4-weight", "group_size": 32, "embeddings": "int4"}
    llm = {"config": TINY, "max_context": 128, "max_prefill": 1}
    recipe = write_llm_recipe(tmp_path, "q", llm, quantize=quantize, backends=[{"name": "xnnpack"}],
                              verify={"agreement": 1.0})
    result = build([recipe], tmp_path / "build", stream=io.StringIO())
    report = json.loads((tmp_path / "build" / "q" / "verify.json").read_text())["llm"]
    assert report["positions"] == 128 and 0.5 < report["agreement"] < 1.0 and report["snr_db"] > 10
    assert report["passed"] is False and result.exit_code == 4
    assert (f"next-token agreement with the float model {report['agreement']} over 128 positions, "
            "below verify.agreement 1.0") in result.failed["verify:q"]
