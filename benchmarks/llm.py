"""Language models: etbuild's `model.llm` build against ExecuTorch's export_llm, on the same weights, in one run.

    python benchmarks/llm.py [--work DIR] [--json out.json] [--tokens 160] [--prompt 64] [--max-prefill 128]
                             [--attention custom] [--kv-cache float32] [--flows etbuild export_llm]
                             [--settings fp32 8da4w] [--architectures llama qwen2 qwen3] [--rounds 3]
                             [--weights rounded gptq] [--results]

Per architecture (--architectures: Llama 3 with GQA and an untied head, Qwen2 with q/k/v biases and tied embeddings,
Qwen3 with q/k norms and tied embeddings), a Hugging Face checkpoint (random weights, seeded; ~20 M parameters, so
that the runner's millisecond clock resolves) is written with `save_pretrained`, beside a byte-level BPE
tokenizer.json trained on a fixed text. export_llm gets the same weights in Meta's names with its model class for the
family (`llama3_2`, `qwen2_5_0_5b`, `qwen3_0_6b`): params.json + a .pth; Llama's q/k rows un-permuted per head
(../shared/LLM.md), the Qwens' kept (`use_hf_rope`). Per setting (float32, 8da4w group 32 + 4-bit embeddings), both
flows build with XNNPACK from clean directories (wall time of the whole build, including etbuild's verify; export_llm
with the KV cache, `use_sdpa_with_kv_cache`, a dynamic shape and `backend.xnnpack.extended_ops=True` in every setting,
as ExecuTorch's XNNPACK guide builds Llama), then each `.pte` runs in ExecuTorch's `TextLLMRunner` in a fresh process
with one thread (its XNNPACK threadpool reset to 1): a fixed prompt of --prompt tokens, --tokens new tokens, greedy;
the runner's own prefill and decode tokens/s, the median of --rounds generations, the setting's programs alternating
process by process (its clock counts milliseconds, so 159 decoded tokens, about 140 ms, resolve 0.7%; and one
generation swings with the machine's load). The same setting's programs are also timed side by side in ExecuTorch's
runtime (`llm_step.py`: the programs alternating in one process for --rounds rounds, one thread; the prompt fed to
`forward` 20 times, then 150 one-token calls): forward's prefill and decode tokens/s from the CPU time and from the
median wall time. Greedy ids come from `forward` in ExecuTorch's runtime, compared with Hugging Face's
generate(do_sample=False); next-token agreement with the float HF model over a fixed 128-token sequence (teacher
forced) for both programs, and the logits' SNR (dB) against it; the same two over a held-out sequence (another seed)
as `heldout_agreement` / `heldout_snr_db`. `--weights` sets ours' `quantize.weights` (unset: the recipe default).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import results  # noqa: E402
from etbuild.build.driver import build  # noqa: E402
from etbuild.llm.checkpoint import make_model  # noqa: E402
from etbuild.llm.runner import decoder  # noqa: E402
from tests.llm_support import hf_greedy, train_tokenizer, write_llm_recipe  # noqa: E402

COMMON: dict[str, Any] = {
    "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 8, "num_attention_heads": 8,
    "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "bos_token_id": 1, "eos_token_id": 2,
}
ARCHITECTURES: dict[str, dict[str, Any]] = {
    # Llama 3: grouped-query attention, an untied output head; Meta's interleaved rotary layout
    "llama": {"config": {"architecture": "LlamaForCausalLM", "tie_word_embeddings": False},
              "model_class": "llama3_2", "params": {}},
    # Qwen2 (Qwen2.5): q/k/v biases, tied embeddings; export_llm keeps Hugging Face's rotary layout
    "qwen2": {"config": {"architecture": "Qwen2ForCausalLM", "tie_word_embeddings": True},
              "model_class": "qwen2_5_0_5b", "params": {"attention_qkv_bias": True, "use_hf_rope": True}},
    # Qwen3: RMSNorm of each head's q and k before the rotary embedding, tied embeddings
    "qwen3": {"config": {"architecture": "Qwen3ForCausalLM", "tie_word_embeddings": True, "head_dim": 64,
                         "attention_bias": False},
              "model_class": "qwen3_0_6b",
              "params": {"use_hf_rope": True, "use_qk_norm": True, "qk_norm_before_rope": True, "head_dim": 64}},
}
"""Each architecture's Hugging Face config (beside COMMON), export_llm's model class and its params.json extras."""
CONTEXT = 256
QUANTIZE = {"scheme": "int8-dynamic-int4-weight", "group_size": 32, "embeddings": "int4"}
SETTINGS = {"fp32": {}, "8da4w": {"quantize": QUANTIZE}}


def checkpoint(folder: Path, architecture: str) -> dict[str, Any]:
    """The HF folder (config, safetensors, tokenizer.json) and the Meta checkpoint beside it; the config."""
    if (folder / "config.json").is_file():
        return json.loads((folder / "config.json").read_text())
    vocab = train_tokenizer(folder, vocab=4096)
    arch = ARCHITECTURES[architecture]
    config = {**COMMON, **arch["config"], "vocab_size": vocab}
    model = make_model(config, seed=0)
    if architecture != "llama":  # biases and norm scales away from their 0 / 1 init, so a wrong mapping shows
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, tensor in model.named_parameters():
                if name.endswith(".bias") or "norm" in name:
                    tensor.add_(0.1 * torch.randn(tensor.shape, generator=generator))
    model.save_pretrained(folder)
    torch.save(meta_state(model.state_dict(), config, hf_rope=arch["params"].get("use_hf_rope", False)),
               folder / "meta.pth")
    (folder / "params.json").write_text(json.dumps({**meta_params(config), **arch["params"]}))
    return json.loads((folder / "config.json").read_text())


def _unpermute(w: torch.Tensor, heads: int) -> torch.Tensor:
    rows = w.shape[0]
    return w.view(heads, 2, rows // heads // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def meta_state(hf: dict[str, torch.Tensor], config: dict[str, Any], hf_rope: bool) -> dict[str, torch.Tensor]:
    """HF decoder weights in Meta's names (export_llm's checkpoint); q/k rows in Meta's rotary layout unless
    export_llm keeps Hugging Face's (`use_hf_rope`). A tied output head is written out, as export_llm's
    converters do."""
    out = {"tok_embeddings.weight": hf["model.embed_tokens.weight"], "norm.weight": hf["model.norm.weight"],
           "output.weight": hf.get("lm_head.weight", hf["model.embed_tokens.weight"])}
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    rotary = (lambda w, n: w) if hf_rope else _unpermute
    names = {"q_proj": ("wq", heads), "k_proj": ("wk", kv_heads), "v_proj": ("wv", None), "o_proj": ("wo", None)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for hf_name, (meta, n) in names.items():
            for kind in ("weight", "bias"):
                key = f"{p}self_attn.{hf_name}.{kind}"
                if key in hf:
                    out[f"layers.{i}.attention.{meta}.{kind}"] = rotary(hf[key], n) if n else hf[key]
        out |= {
            f"layers.{i}.feed_forward.w1.weight": hf[p + "mlp.gate_proj.weight"],
            f"layers.{i}.feed_forward.w2.weight": hf[p + "mlp.down_proj.weight"],
            f"layers.{i}.feed_forward.w3.weight": hf[p + "mlp.up_proj.weight"],
            f"layers.{i}.attention_norm.weight": hf[p + "input_layernorm.weight"],
            f"layers.{i}.ffn_norm.weight": hf[p + "post_attention_layernorm.weight"],
        }
        for qk in "qk":
            if f"{p}self_attn.{qk}_norm.weight" in hf:
                out[f"layers.{i}.attention.{qk}_norm_fn.weight"] = hf[f"{p}self_attn.{qk}_norm.weight"]
    return {k: v.contiguous().clone() for k, v in out.items()}


def meta_params(config: dict[str, Any]) -> dict[str, Any]:
    return {"dim": config["hidden_size"], "n_layers": config["num_hidden_layers"],
            "n_heads": config["num_attention_heads"], "n_kv_heads": config["num_key_value_heads"],
            "vocab_size": config["vocab_size"],
            "hidden_dim": config["intermediate_size"], "norm_eps": config["rms_norm_eps"],
            "rope_theta": config["rope_theta"], "use_scaled_rope": False}


def teacher_forced(hf: Any, sequence: list[int]) -> np.ndarray:
    """The float HF model's next-token logits after each prefix of `sequence`."""
    with torch.no_grad():
        return torch.stack([hf(torch.tensor([sequence[: i + 1]])).logits[0, -1] for i in range(len(sequence))]).numpy()


def scores(logits: np.ndarray, reference: np.ndarray, prefix: str = "") -> dict[str, float]:
    """Next-token agreement with the float model and the logits' SNR (dB) against it."""
    ref, noise = reference.astype(np.float64), (logits.astype(np.float64) - reference)
    return {f"{prefix}agreement": round(float(np.mean(logits.argmax(-1) == reference.argmax(-1))), 4),
            f"{prefix}snr_db": round(float(10 * np.log10(np.sum(ref**2) / np.sum(noise**2))), 2)}


def build_ours(work: Path, folder: Path, setting: str, max_prefill: int = 128,
               attention: str = "portable", kv_cache: str = "float32",
               weights: str | None = None) -> tuple[Path, float]:
    """A clean etbuild build; `max_prefill` > 1 is a dynamic forward (the prompt in one call)."""
    name = f"ours-{setting}"
    work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work / "build" / name, ignore_errors=True)  # a clean build
    quantize = SETTINGS[setting].get("quantize")
    if quantize is not None and weights is not None:
        quantize = {**quantize, "weights": weights}
    recipe = write_llm_recipe(work, name, {"path": str(folder), "max_context": CONTEXT, "max_prefill": max_prefill},
                              llm={"attention": attention, "kv_cache": kv_cache}, backends=[{"name": "xnnpack"}],
                              verify={"agreement": 0.0}, **({"quantize": quantize} if quantize else {}))
    start = time.perf_counter()
    result = build([recipe], work / "build", stream=io.StringIO())
    seconds = time.perf_counter() - start
    if result.exit_code != 0:
        raise SystemExit(f"etbuild build of {name} failed: {result.failed}")
    return work / "build" / name / f"{name}.pte", seconds


def build_export_llm(work: Path, folder: Path, setting: str, model_class: str) -> tuple[Path, float]:
    out = work / f"export_llm-{setting}"
    shutil.rmtree(out, ignore_errors=True)  # a clean build
    out.mkdir(parents=True, exist_ok=True)
    args = [f"base.model_class={model_class}", f"base.checkpoint={folder / 'meta.pth'}",
            f"base.params={folder / 'params.json'}", "model.use_kv_cache=True", "model.use_sdpa_with_kv_cache=True",
            "model.enable_dynamic_shape=True", "model.dtype_override=fp32", "backend.xnnpack.enabled=True",
            "backend.xnnpack.extended_ops=True", f"export.max_seq_length={CONTEXT}",
            f"export.max_context_length={CONTEXT}",
            f"export.output_dir={out}", "export.output_name=model.pte",
            "base.metadata='{\"get_bos_id\":1,\"get_eos_ids\":[2]}'"]
    if setting == "8da4w":
        args += ["quantization.qmode=8da4w", "quantization.group_size=32", "quantization.embedding_quantize='4,32'"]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "executorch.extension.llm.export.export_llm", *args],
                          capture_output=True, text=True, cwd=out, check=False)
    seconds = time.perf_counter() - start
    pte = out / "model.pte"
    if proc.returncode != 0 or not pte.is_file():
        raise SystemExit(f"export_llm {setting} failed:\n{proc.stderr[-3000:]}")
    return pte, seconds


RUNNER = r"""
import json, sys
import torch
torch.set_num_threads(1)
import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
import executorch.kernels.quantized  # noqa: F401
from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner
from executorch.extension.pybindings import _C
_C._unsafe_reset_threadpool(1)  # XNNPACK's threads: the runner shares this pool
pte, tokenizer, prompt, tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runner = TextLLMRunner(pte, tokenizer)
stats = []
runner.generate(prompt, GenerationConfig(max_new_tokens=tokens, temperature=0.0, echo=False),
                token_callback=lambda piece: None,
                stats_callback=lambda s: stats.append(json.loads(s.to_json_string())))
print("STATS " + json.dumps(stats[-1]))
"""


def runner_speed(pte: Path, tokenizer: Path, prompt: str, tokens: int) -> dict[str, Any]:
    """ExecuTorch's TextLLMRunner in a fresh process on one thread: its own Stats."""
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(pte), str(tokenizer), prompt, str(tokens)],
                          capture_output=True, text=True, check=False, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("STATS ")), None)
    if line is None:
        raise SystemExit(f"TextLLMRunner failed on {pte}:\n{proc.stderr[-2000:]}")
    return json.loads(line[6:])


def runner_speeds(
    ptes: list[Path], tokenizer: Path, prompt: str, tokens: int, rounds: int
) -> dict[str, dict[str, Any]]:
    """`runner_speed` of each program for `rounds` rounds, the programs alternating process by process (who goes
    first alternating round by round): per program the median prefill and decode tokens/s over the rounds, and
    each round's, since one generation at a millisecond's resolution swings with the machine."""
    stats: dict[str, list[dict[str, Any]]] = {str(pte): [] for pte in ptes}
    for r in range(rounds):
        for pte in ptes if r % 2 == 0 else ptes[::-1]:
            stats[str(pte)].append(runner_speed(pte, tokenizer, prompt, tokens))
    speeds = {}
    for pte, runs in stats.items():
        prefill = [s["prefill_token_per_sec"] for s in runs]
        decode = [s["decode_token_per_sec"] for s in runs]
        speeds[pte] = {"prefill_tok_s": statistics.median(prefill), "decode_tok_s": statistics.median(decode),
                       "runner_prefill_rounds": prefill, "runner_decode_rounds": decode,
                       "prompt_tokens": runs[-1]["prompt_tokens"], "generated_tokens": runs[-1]["generated_tokens"]}
    return speeds


FORWARD = r"""
import json, sys
import numpy as np, torch
import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
import executorch.kernels.quantized  # noqa: F401
from executorch.runtime import Runtime
pte, sequence, prompt_len, tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
method = Runtime.get().load_program(pte).load_method("forward")
logits = [method.execute([torch.tensor([[t]]), torch.tensor([i])])[0].reshape(-1).numpy()
          for i, t in enumerate(sequence)]
np.save(sys.argv[5], np.stack(logits))
method = Runtime.get().load_program(pte).load_method("forward")
prompt = sequence[:prompt_len]
out = method.execute([torch.tensor([prompt[:1]]), torch.tensor([0])])[0]
for i, t in enumerate(prompt[1:], 1):
    out = method.execute([torch.tensor([[t]]), torch.tensor([i])])[0]
greedy = []
for i in range(tokens):
    greedy.append(int(out.argmax()))
    out = method.execute([torch.tensor([[greedy[-1]]]), torch.tensor([prompt_len + i])])[0]
print("GREEDY " + json.dumps(greedy))
"""


def forward_checks(pte: Path, sequence: list[int], prompt: int, tokens: int,
                   work: Path) -> tuple[np.ndarray, list[int]]:
    """Teacher-forced logits over `sequence` and greedy ids after its first `prompt` tokens, in ExecuTorch's runtime."""
    out = work / f"{pte.stem}-logits.npy"
    proc = subprocess.run([sys.executable, "-c", FORWARD, str(pte), json.dumps(sequence), str(prompt), str(tokens),
                           str(out)], capture_output=True, text=True, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("GREEDY ")), None)
    if line is None:
        raise SystemExit(f"forward failed on {pte}:\n{proc.stderr[-2000:]}")
    return np.load(out), json.loads(line[7:])


def step_speeds(ptes: list[Path], prompt: int, rounds: int) -> dict[str, dict[str, Any]]:
    """Per `.pte`, forward's prefill (a `prompt`-token prompt) and decode tokens/s in ExecuTorch's runtime, one
    thread, the programs alternating in one child for `rounds` rounds (`llm_step.py`): from the CPU time and from
    the median wall time, each the median over the rounds."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "llm_step.py"), *map(str, ptes),
                           "--rounds", str(rounds), "--prompt", str(prompt), "--threads", "1"],
                          capture_output=True, text=True, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"})
    runs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not runs:
        raise SystemExit(f"llm_step.py failed:\n{proc.stderr[-2000:]}")
    speeds = {}
    for pte in map(str, ptes):
        mine = [run for run in runs if run["pte"] == pte]

        def rate(key: str, tokens: int, mine: list[dict[str, Any]] = mine) -> float:
            return round(tokens * 1e3 / statistics.median(run[key] for run in mine), 1)

        speeds[pte] = {"forward_prefill_tok_s_cpu": rate("cpu_ms_per_prefill", prompt),
                       "forward_prefill_tok_s_wall": rate("median_prefill_ms", prompt),
                       "forward_decode_tok_s_cpu": rate("cpu_ms_per_step", 1),
                       "forward_decode_tok_s_wall": rate("median_ms", 1)}
    return speeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/etbuild-llm-bench"))
    parser.add_argument("--json", type=Path)
    results.add_option(parser, "llm-vs-export_llm")
    parser.add_argument("--tokens", type=int, default=160, help="new tokens per runner generation")
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--architectures", nargs="+", choices=list(ARCHITECTURES), default=list(ARCHITECTURES))
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--flows", nargs="+", choices=["etbuild", "export_llm"], default=["etbuild", "export_llm"])
    parser.add_argument("--max-prefill", type=int, default=128, help="ours: longest chunk one call takes")
    parser.add_argument("--attention", choices=["portable", "custom"], default="custom", help="ours: llm.attention")
    parser.add_argument("--weights", choices=["rounded", "gptq"], help="ours: quantize.weights (default: the recipe's)")
    parser.add_argument("--kv-cache", choices=["float32", "int8"], default="float32", help="ours: llm.kv_cache")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the alternating forward timing and runner generations")
    args = parser.parse_args()
    if args.prompt + args.tokens > CONTEXT:
        parser.error(f"--prompt + --tokens is {args.prompt + args.tokens}, past the programs' context of {CONTEXT}")
    rows: list[dict[str, Any]] = []
    for architecture in args.architectures:
        rows += measure(args, architecture)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2))
    if args.results:
        results.save(args.results, with_ratios(rows), title="etbuild against export_llm: same weights, one run",
                     columns=COLUMNS, notes=NOTES)


COLUMNS = ["architecture", "setting", "flow", "build_s", "pte_bytes", "greedy_match", "agreement", "prefill_tok_s",
           "decode_tok_s", "forward_prefill_tok_s_cpu", "forward_decode_tok_s_cpu", "vs_export_llm.decode_tok_s",
           "vs_export_llm.forward_decode_tok_s_cpu", "vs_export_llm.build_s", "load_average"]
"""The columns of the results table (`vs_export_llm`: ours / export_llm's, on our rows)."""
NOTES = ["Both flows: KV cache, ExecuTorch's custom SDPA (export_llm `use_sdpa_with_kv_cache`, ours `llm.attention: "
         "custom`), a dynamic prefill, XNNPACK with export_llm's `backend.xnnpack.extended_ops=True` in every setting; "
         "random weights.",
         "prefill_tok_s / decode_tok_s: ExecuTorch's TextLLMRunner, one thread, fresh process, median of --rounds "
         "generations; forward_*_cpu: `forward` in ExecuTorch's runtime by CPU time (llm_step.py).",
         "greedy_match: of Hugging Face's 32 greedy tokens; agreement: teacher-forced top-1 against the float model "
         "over 128 positions."]


def with_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows, ours with `vs_export_llm`: its rates and build time over export_llm's on the same model and setting."""
    theirs = {(r["architecture"], r["setting"]): r for r in rows if r["flow"] == "export_llm"}
    keys = ("prefill_tok_s", "decode_tok_s", "forward_prefill_tok_s_cpu", "forward_decode_tok_s_cpu", "build_s",
            "pte_bytes")
    out = []
    for r in rows:
        other = theirs.get((r["architecture"], r["setting"])) if r["flow"] == "etbuild" else None
        ratios = {k: round(r[k] / other[k], 3) for k in keys} if other else None
        out.append({**r, **({"vs_export_llm": ratios} if ratios else {})})
    return out


def measure(args: argparse.Namespace, architecture: str) -> list[dict[str, Any]]:
    """Both flows' rows for one architecture, one per setting and flow, each printed as it is measured."""
    folder = args.work / f"checkpoint-{architecture}"
    config = checkpoint(folder, architecture)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    text = ("the quick brown fox jumps over the lazy dog " * 40)
    prompt_text = tokenizer.decode(tokenizer.encode(text).ids[: args.prompt])
    hf = decoder(path=str(folder), max_context=CONTEXT, max_prefill=1).decoder.model
    sequence, heldout = (torch.randint(3, config["vocab_size"], (128,), generator=torch.Generator().manual_seed(seed))
                         .tolist() for seed in (0, 1))
    reference, heldout_reference = teacher_forced(hf, sequence), teacher_forced(hf, heldout)
    expected = hf_greedy(hf, sequence[:8], 32)
    rows = []
    for setting in args.settings:
        built: dict[str, tuple[Path, float]] = {}
        for flow in args.flows:
            work = args.work / architecture / flow
            if flow == "etbuild":
                built[flow] = build_ours(work, folder, setting, args.max_prefill, args.attention, args.kv_cache,
                                         args.weights)
            else:
                built[flow] = build_export_llm(work, folder, setting, ARCHITECTURES[architecture]["model_class"])
        ptes = [pte for pte, _ in built.values()]
        steps = step_speeds(ptes, args.prompt, args.rounds)
        runner = runner_speeds(ptes, folder / "tokenizer.json", prompt_text, args.tokens, args.rounds)
        for flow, (pte, seconds) in built.items():
            work = args.work / architecture / flow
            logits, greedy = forward_checks(pte, sequence, 8, 32, work)
            heldout_logits, _ = forward_checks(pte, heldout, 8, 0, work)
            rows.append({
                "architecture": architecture, "parameters": sum(t.numel() for t in hf.parameters()),
                "setting": setting, "flow": flow, "build_s": round(seconds, 1), "pte_bytes": pte.stat().st_size,
                "greedy_match": sum(a == b for a, b in zip(greedy, expected)),
                **scores(logits, reference), **scores(heldout_logits, heldout_reference, "heldout_"),
                **runner[str(pte)], **steps[str(pte)],
                "load_average": Path("/proc/loadavg").read_text().split()[:3],
            })
            print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    main()
