"""benchmarks/llm_decode.py: the weight bytes a decode step reads, what gets built before anything is timed, and
the children's environment (no program is built or timed here)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from etbuild.errors import StageError
from etbuild.verify.export_llm import LlamaShape
from tests.benchmarks.support import load_script


@pytest.fixture(scope="module")
def decode():
    return load_script("llm_decode")


@pytest.mark.parametrize("name", ["anchor", "smollm2", "qwen05"])
def test_weight_bytes_count_every_linear_layer_the_head_and_one_embedding_row(decode, name: str) -> None:
    s = decode.SHAPES[name]
    d, head = s["dim"], s["dim"] // s["n_heads"]
    per_layer = d * head * (2 * s["n_heads"] + 2 * s["n_kv_heads"]) + 3 * d * s["hidden_dim"]
    weights = s["n_layers"] * per_layer + s["vocab_size"] * d + d
    shape = LlamaShape(**s, max_seq_len=decode.CONTEXT, max_context_len=decode.CONTEXT)
    assert decode.weight_bytes(shape, "fp32") == 4 * weights
    assert decode.weight_bytes(shape, "8da4w") == pytest.approx(weights * (0.5 + 4 / 32))


def test_everything_is_built_first_and_a_failed_build_is_a_note(decode, monkeypatch, tmp_path: Path) -> None:
    calls = []

    def program(name: str, form: str, flow: str, cache: Path) -> None:
        calls.append((name, form, flow, cache))
        if form == "8da4w" and flow == "export_llm":
            raise StageError("export_llm failed (exit 1):\nRuntimeError: dequantize_affine")

    monkeypatch.setattr(decode, "program", program)
    args = argparse.Namespace(shapes="anchor,smollm2", forms="fp32,8da4w", flows="export_llm,etbuild", only="",
                              cache=tmp_path)
    built, failed = decode.build_all(args)
    assert [c[:3] for c in calls] == [(n, f, w) for n in ("anchor", "smollm2") for f in ("fp32", "8da4w")
                                      for w in ("export_llm", "etbuild")]
    assert {c[3] for c in calls} == {tmp_path}
    assert ("anchor", "8da4w", "export_llm") not in built and ("anchor", "8da4w", "etbuild") in built
    assert failed == [f"{n} 8da4w export_llm: not built: RuntimeError: dequantize_affine"
                      for n in ("anchor", "smollm2")]
    calls.clear()
    args.only = "fp32:etbuild"
    assert decode.build_all(args) == ([("anchor", "fp32", "etbuild"), ("smollm2", "fp32", "etbuild")], [])


def test_children_drop_thread_settings_and_keep_the_pythonpath_after_the_checkout(decode, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("ETBUILD_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    env = decode._env()
    assert "OMP_NUM_THREADS" not in env and "ETBUILD_THREADS" not in env
    assert env["PYTHONPATH"].split(":") == [str(decode.ROOT), "/somewhere"]
    monkeypatch.delenv("PYTHONPATH")
    assert decode._env()["PYTHONPATH"] == str(decode.ROOT)
