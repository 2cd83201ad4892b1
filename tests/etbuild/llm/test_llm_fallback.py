"""`verify.fallback: auto`: a quantized language model keeps the layers that cost the most agreement float."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from etbuild.build.driver import build
from etbuild.build.stage_table import quantize_sections
from etbuild.errors import RecipeError, VerificationError
from etbuild.llm.agreement import one_token_calls, search_sequence, teacher_forced
from etbuild.llm.calibration import GENERATED_SEED
from etbuild.llm.fallback import keep_float
from etbuild.llm.swap import quantized_layers, swappable
from etbuild.model import build_model
from etbuild.quantize import flow
from etbuild.quantize.calibration import calibration_inputs
from etbuild.quantize.modules import SchemeMap
from etbuild.recipe import load_recipe
from etbuild.stages.export import export_method, run_export
from etbuild.stages.quantize import run_quantize
from tests.llm_support import TINY, write_llm_recipe

INT4 = {"scheme": "int8-dynamic-int4-weight", "group_size": 32, "embeddings": "int4"}
XNNPACK = [{"name": "xnnpack"}]
LLM = {"config": TINY, "max_context": 128, "max_prefill": 16}


def test_the_search_sequence_is_not_verify_s_nor_calibration_s(tmp_path):
    recipe = load_recipe(write_llm_recipe(tmp_path, "s", {**LLM, "max_context": 256}, quantize=INT4,
                                          backends=XNNPACK, verify={"fallback": "auto", "seed": 5}))
    ours = search_sequence(recipe)
    short = load_recipe(write_llm_recipe(tmp_path, "t", LLM, quantize=INT4, backends=XNNPACK,
                                         verify={"fallback": "auto", "seed": 5}))
    assert search_sequence(short) == ours[:127]  # a cache of 128: one position short (see search_sequence)
    verify = torch.randint(0, TINY["vocab_size"], (128,), generator=torch.Generator().manual_seed(5)).tolist()
    calibration = torch.randint(0, TINY["vocab_size"], (128,),
                                generator=torch.Generator().manual_seed(GENERATED_SEED + 0)).tolist()
    assert len(ours) == 128 and max(ours) < TINY["vocab_size"] and len(set(ours)) > 80
    assert ours == search_sequence(recipe)  # seeded
    assert sum(a == b for a, b in zip(ours, verify)) < 10 and sum(a == b for a, b in zip(ours, calibration)) < 10


@pytest.mark.parametrize(("sections", "problem"), [
    ({}, "the recipe has no quantize section"),
    ({"quantize": INT4, "backends": XNNPACK, "llm": None}, "the model is not a model.llm language model"),
])
def test_fallback_without_a_quantized_language_model_is_a_recipe_error(tmp_path, sections, problem):
    if "llm" in sections:  # the same keys on a model.factory recipe
        sections = {k: v for k, v in sections.items() if k != "llm"}
        path = tmp_path / "f.yaml"
        path.write_text("name: f\nmodel: {factory: etbuild.zoo:mlp, inputs: [{shape: [1, 64], dtype: float32}]}\n"
                        "quantize: {scheme: int8-dynamic}\nverify: {agreement: 0.9, fallback: auto}\n")
    else:
        path = write_llm_recipe(tmp_path, "f", LLM, verify={"agreement": 0.9, "fallback": "auto"}, **sections)
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert str(info.value).endswith(
        "verify.fallback: expected fallback auto only with a quantized language model (model.llm and a quantize "
        f"section); {problem}")
    assert "f.yaml:" in str(info.value)


def test_fallback_takes_none_or_auto(tmp_path):
    path = write_llm_recipe(tmp_path, "f", LLM, quantize=INT4, backends=XNNPACK, verify={"fallback": "always"})
    with pytest.raises(RecipeError, match="verify.fallback: expected one of none, auto; got 'always'"):
        load_recipe(path)


@pytest.fixture
def one_thread():
    """torch on one thread, as the build's stages run it (much faster for a tiny model on a shared machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_layer_run_float_in_the_converted_graph_equals_converting_it_float_and_gptq_still_applies(
        tmp_path, one_thread):
    """What the search measures is what it builds: a layer swapped to float in the converted graph gives the
    logits of the plan that keeps it float, and the int4 linears that stay keep their GPTQ weights."""
    quantize = {**INT4, "weights": "gptq", "calibration": {"samples": 2}}
    recipe = load_recipe(write_llm_recipe(tmp_path, "e", LLM, quantize=quantize, backends=XNNPACK))
    ep = export_method(recipe, build_model(recipe), "forward")
    cfg = recipe.quantize
    plan = flow.Plan(SchemeMap(cfg.scheme), cfg.per_channel, cfg.group_size, cfg.embeddings, weights=cfg.weights)
    calibration = calibration_inputs(recipe, "forward")
    uniform = flow.quantize(ep, plan, calibration)
    layers = quantized_layers(uniform, flow.captured(ep))
    assert [layer.node for layer in layers][:2] == ["embedding", "linear"] and len(layers) == 16
    samples = one_token_calls(search_sequence(recipe)[:24])

    def logits(model):
        flow.restore_state(model, ep)
        out = teacher_forced(model, samples)
        flow.restore_state(model, ep)
        return out

    kept = ["embedding", "linear_3", "linear_14"]
    before = logits(uniform)
    with swappable(uniform, layers) as swapper:
        swapper.keep(set(kept))
        swapped = logits(uniform)
        swapper.keep(set())  # every layer quantized again
        np.testing.assert_array_equal(logits(uniform), before)
    converted = flow.quantize(ep, keep_float(plan, kept), calibration)
    np.testing.assert_array_equal(swapped, logits(converted))
    added = ("_etbuild_float_",)
    assert not any(n.name.startswith(added) for n in uniform.graph.nodes)  # undone
    np.testing.assert_array_equal(logits(uniform), before)
    assert np.abs(before - swapped).max() > 1e-3
    rounded = flow.quantize(ep, replace(plan, weights=flow.ROUNDED), calibration)
    ints = {name: _int4_codes(model) for name, model in
            (("uniform", uniform), ("converted", converted), ("rounded", rounded))}
    assert len(ints["converted"]) == len(ints["uniform"]) - 2  # two linears float, the embedding is no linear
    same = [k for k in ints["converted"] if torch.equal(ints["converted"][k], ints["uniform"][k])]
    assert len(same) == len(ints["converted"]) == 13
    assert sum(not torch.equal(ints["rounded"][k], ints["uniform"][k]) for k in ints["rounded"]) >= 12


def _int4_codes(model):
    """Per int4 linear (by node name), the int4 codes of its weight."""
    codes = {}
    for node in model.graph.nodes:
        weight = node.args[1] if node.target is torch.ops.aten.linear.default else None
        if weight is not None and weight.target is torch.ops.quantized_decomposed.dequantize_per_channel_group.default:
            codes[node.name] = getattr(model, weight.args[0].target)
    return codes


@pytest.mark.slow
def test_fallback_keeps_layers_float_until_the_agreement_holds(tmp_path):
    """Uniform 8da4w of the tiny Llama agrees on 82% of verify's 128 positions (85% of the search's), the
    float model on all: with verify.agreement 0.9 the build fails, and with fallback auto it keeps the
    layers that cost the most float and passes in our runtime (and ExecuTorch's, when installed)."""
    for name, verify in (("uniform", {"agreement": 0.9}), ("auto", {"agreement": 0.9, "fallback": "auto"})):
        write_llm_recipe(tmp_path, name, LLM, quantize=INT4, backends=XNNPACK, verify=verify)
    result = build([tmp_path / "uniform.yaml", tmp_path / "auto.yaml"], tmp_path / "build", stream=io.StringIO())
    assert set(result.failed) == {"verify:uniform"}
    uniform = json.loads((tmp_path / "build" / "uniform" / "verify.json").read_text())["llm"]
    assert (f"next-token agreement with the float model {uniform['agreement']} over 128 positions, below "
            "verify.agreement 0.9") in result.failed["verify:uniform"]
    assert "fallback" not in uniform and uniform["agreement"] < 0.9

    search = json.loads((tmp_path / "build" / "auto" / "quantized" / "layers.json").read_text())["methods"][
        "forward"]["agreement_search"]
    report = json.loads((tmp_path / "build" / "auto" / "verify.json").read_text())["llm"]
    assert search["passed"] and search["uniform"]["agreement"] < 0.92 <= search["final"]["agreement"]
    assert 1 <= len(search["kept_float"]) < 16 and search["kept_float"] == [
        s["node"] for s in search["sensitivity"][:len(search["kept_float"])]]
    assert [k["node"] for k in report["fallback"]["kept_float"]] == search["kept_float"]
    assert report["agreement"] >= 0.9 and report["passed"] and report["snr_db"] > uniform["snr_db"]
    if "executorch" in report:
        assert report["executorch"]["agreement"] >= 0.9
    kept = json.loads((tmp_path / "build" / "auto" / "quantize.json").read_text())["methods"]["forward"]["kept_float"]
    assert [k["node"] for k in kept] == search["kept_float"]
    sizes = [(tmp_path / "build" / n / f"{n}.pte").stat().st_size for n in ("uniform", "auto")]
    assert sizes[0] < sizes[1] < 4 * sizes[0]


@pytest.mark.slow
def test_a_search_that_cannot_reach_the_threshold_names_the_best_agreement_and_the_costliest_layers(
        tmp_path, one_thread):
    """An int8 KV cache stays int8 with every layer float: on a sequence where the int8 cache alone flips a
    next token, agreement 1.0 is out of reach. The stage fails after writing layers.json, saves no program, and
    says how far it got and which layers cost the most."""
    recipe = _int8_cache_recipe_that_misses_1(tmp_path)
    exports, outs, layers = {"forward": tmp_path / "e.pt2"}, {"forward": tmp_path / "q.pt2"}, tmp_path / "layers.json"
    run_export(recipe, exports)
    with pytest.raises(VerificationError) as info:
        run_quantize(recipe, exports, outs, layers)
    record = json.loads(layers.read_text())["methods"]["forward"]["agreement_search"]
    best, worst = record["best"], record["sensitivity"][:3]
    assert not record["passed"] and record["kept_float"] == [] and not outs["forward"].exists()
    assert (record["positions"], record["rank_positions"]) == (127, 32)
    assert best["agreement"] == max(s["agreement"] for s in record["steps"]) < 1.0
    assert [s["kept"] for s in record["steps"]] == [1, 2, 4, 8, 16]  # doubling up to every layer
    assert str(info.value) == (
        f"{recipe.where('verify.fallback')}: verify.fallback: auto: next-token agreement with the float model "
        f"reaches at best {best['agreement']} over 127 positions of the search's sequence ({best['kept']} layers "
        "kept float), below its target 1.0 (verify.agreement 1.0 plus 0.02, at most 1); the layers that cost the "
        "most (agreement with each alone float, over the first 32 positions): "
        + ", ".join(f"{s['module']} ({s['node']}: {s['agreement']})" for s in worst)
        + f" (see {layers})")
    assert "k.yaml:" in str(info.value)


def _int8_cache_recipe_that_misses_1(tmp_path):
    """The int8-cache 8da4w recipe (verify.agreement 1.0, fallback auto) with the first verify.seed whose search
    sequence the eager int8-cache model does not follow exactly (the float cache's argmax differs somewhere)."""
    for seed in range(1, 20):
        recipe = load_recipe(write_llm_recipe(tmp_path, "k", LLM, llm={"attention": "custom", "kv_cache": "int8"},
                                              quantize=INT4, backends=XNNPACK,
                                              verify={"agreement": 1.0, "fallback": "auto", "seed": seed}))
        int8 = build_model(recipe)
        samples = one_token_calls(search_sequence(recipe))
        if (teacher_forced(int8, samples).argmax(-1) != teacher_forced(int8.with_float_cache(), samples).argmax(
                -1)).any():
            return recipe
    raise AssertionError("the int8 cache followed the float one on 19 sequences")


def test_the_quantize_stage_is_keyed_on_the_search_s_target_only_when_it_searches(tmp_path):
    keys = {}
    for name, verify in (("plain", {"agreement": 0.9}), ("auto", {"agreement": 0.9, "fallback": "auto"})):
        recipe = load_recipe(write_llm_recipe(tmp_path, name, LLM, quantize=INT4, backends=XNNPACK, verify=verify))
        keys[name] = quantize_sections(recipe)
    assert keys["plain"] == ("model", "quantize", "backends", "verify.samples", "verify.seed")
    assert keys["auto"] == (*keys["plain"], "verify.fallback", "verify.agreement")


@pytest.mark.slow
def test_under_int8_static_every_count_is_measured_converted_again(tmp_path):
    """int8-static quantizes each layer's output too, which the swap leaves: keeping a layer float that way says
    little. So every count the search tries is converted again (a calibration each) and measured; the tiny Llama
    reaches verify.agreement 0.9 + 0.02 with two linears float, and its program passes verify."""
    write_llm_recipe(tmp_path, "s", LLM, quantize={"scheme": "int8-static"}, backends=XNNPACK,
                     verify={"agreement": 0.9, "fallback": "auto"})
    result = build([tmp_path / "s.yaml"], tmp_path / "build", stream=io.StringIO())
    assert not result.failed
    search = json.loads((tmp_path / "build" / "s" / "quantized" / "layers.json").read_text())["methods"][
        "forward"]["agreement_search"]
    assert search["static"] and search["passed"] and search["steps"]
    assert all(step["converted"] for step in search["steps"])
    assert search["uniform"]["agreement"] < 0.92 <= search["final"]["agreement"]
    assert search["kept_float"] == [s["node"] for s in search["sensitivity"][:len(search["kept_float"])]]
    report = json.loads((tmp_path / "build" / "s" / "verify.json").read_text())["llm"]
    assert report["passed"] and [k["node"] for k in report["fallback"]["kept_float"]] == search["kept_float"]
