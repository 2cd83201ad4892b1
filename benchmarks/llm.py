"""Language models: etbuild's `model.llm` build against ExecuTorch's export_llm, on the same weights, in one run.

    python benchmarks/llm.py [--work DIR] [--json out.json] [--tokens 64] [--prompt 64] [--max-prefill 128]
                             [--attention custom] [--flows etbuild export_llm] [--settings fp32 8da4w]

A Llama-shaped Hugging Face checkpoint (random weights, seeded; ~26 M parameters, so that the
runner's millisecond clock resolves) is written with `save_pretrained`, beside a byte-level BPE
tokenizer.json trained on a fixed text. export_llm gets the same weights in Meta's layout
(params.json + a .pth; q/k rows un-permuted per head, ../shared/LLM.md). Per setting (float32,
8da4w group 32 + 4-bit embeddings), both flows build with XNNPACK from clean directories (wall time
of the whole build, including etbuild's verify), then each `.pte` runs in ExecuTorch's
`TextLLMRunner` in a fresh process with one thread: a fixed prompt of --prompt tokens, --tokens new
tokens, greedy; the runner's own prefill and decode tokens/s. Greedy ids come from `forward` in
ExecuTorch's runtime, compared with Hugging Face's generate(do_sample=False); next-token agreement
with the float HF model over a fixed 128-token sequence (teacher forced) for both programs.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from etbuild.build.driver import build  # noqa: E402
from etbuild.llm.checkpoint import make_model  # noqa: E402
from etbuild.llm.runner import decoder  # noqa: E402
from tests.llm_support import hf_greedy, train_tokenizer, write_llm_recipe  # noqa: E402

CONFIG: dict[str, Any] = {
    "architecture": "LlamaForCausalLM", "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 8,
    "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
}
CONTEXT = 256
QUANTIZE = {"scheme": "int8-dynamic-int4-weight", "group_size": 32, "embeddings": "int4"}
SETTINGS = {"fp32": {}, "8da4w": {"quantize": QUANTIZE}}


def checkpoint(folder: Path) -> dict[str, Any]:
    """The HF folder (config, safetensors, tokenizer.json) and the Meta checkpoint beside it; the config."""
    if (folder / "config.json").is_file():
        return json.loads((folder / "config.json").read_text())
    vocab = train_tokenizer(folder, vocab=4096)
    config = {**CONFIG, "vocab_size": vocab}
    model = make_model(config, seed=0)
    model.save_pretrained(folder)
    torch.save(meta_state(model.state_dict(), config), folder / "meta.pth")
    (folder / "params.json").write_text(json.dumps(meta_params(config)))
    return json.loads((folder / "config.json").read_text())


def _unpermute(w: torch.Tensor, heads: int) -> torch.Tensor:
    rows, cols = w.shape
    return w.view(heads, 2, rows // heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def meta_state(hf: dict[str, torch.Tensor], config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """HF Llama weights in Meta's names and rotary layout."""
    out = {"tok_embeddings.weight": hf["model.embed_tokens.weight"], "norm.weight": hf["model.norm.weight"],
           "output.weight": hf["lm_head.weight"]}
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {
            f"layers.{i}.attention.wq.weight": _unpermute(hf[p + "self_attn.q_proj.weight"], heads),
            f"layers.{i}.attention.wk.weight": _unpermute(hf[p + "self_attn.k_proj.weight"], kv_heads),
            f"layers.{i}.attention.wv.weight": hf[p + "self_attn.v_proj.weight"],
            f"layers.{i}.attention.wo.weight": hf[p + "self_attn.o_proj.weight"],
            f"layers.{i}.feed_forward.w1.weight": hf[p + "mlp.gate_proj.weight"],
            f"layers.{i}.feed_forward.w2.weight": hf[p + "mlp.down_proj.weight"],
            f"layers.{i}.feed_forward.w3.weight": hf[p + "mlp.up_proj.weight"],
            f"layers.{i}.attention_norm.weight": hf[p + "input_layernorm.weight"],
            f"layers.{i}.ffn_norm.weight": hf[p + "post_attention_layernorm.weight"],
        }
    return {k: v.contiguous().clone() for k, v in out.items()}


def meta_params(config: dict[str, Any]) -> dict[str, Any]:
    return {"dim": config["hidden_size"], "n_layers": config["num_hidden_layers"],
            "n_heads": config["num_attention_heads"], "n_kv_heads": config["num_key_value_heads"],
            "vocab_size": config["vocab_size"],
            "hidden_dim": config["intermediate_size"], "norm_eps": config["rms_norm_eps"],
            "rope_theta": config["rope_theta"], "use_scaled_rope": False}


def build_ours(work: Path, folder: Path, setting: str, max_prefill: int = 128,
               attention: str = "portable") -> tuple[Path, float]:
    """A clean etbuild build; `max_prefill` > 1 is a dynamic forward (the prompt in one call)."""
    name = f"ours-{setting}"
    work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work / "build" / name, ignore_errors=True)  # a clean build
    recipe = write_llm_recipe(work, name, {"path": str(folder), "max_context": CONTEXT, "max_prefill": max_prefill},
                              llm={"attention": attention}, backends=[{"name": "xnnpack"}],
                              verify={"agreement": 0.0}, **SETTINGS[setting])
    start = time.perf_counter()
    result = build([recipe], work / "build", stream=io.StringIO())
    seconds = time.perf_counter() - start
    if result.exit_code != 0:
        raise SystemExit(f"etbuild build of {name} failed: {result.failed}")
    return work / "build" / name / f"{name}.pte", seconds


def build_export_llm(work: Path, folder: Path, setting: str) -> tuple[Path, float]:
    out = work / f"export_llm-{setting}"
    out.mkdir(parents=True, exist_ok=True)
    args = ["base.model_class=llama3_2", f"base.checkpoint={folder / 'meta.pth'}",
            f"base.params={folder / 'params.json'}", "model.use_kv_cache=True", "model.use_sdpa_with_kv_cache=True",
            "model.enable_dynamic_shape=True", "model.dtype_override=fp32", "backend.xnnpack.enabled=True",
            f"export.max_seq_length={CONTEXT}", f"export.max_context_length={CONTEXT}",
            f"export.output_dir={out}", "export.output_name=model.pte",
            "base.metadata='{\"get_bos_id\":1,\"get_eos_ids\":[2]}'"]
    if setting == "8da4w":
        args += ["quantization.qmode=8da4w", "quantization.group_size=32", "quantization.embedding_quantize='4,32'",
                 "backend.xnnpack.extended_ops=True"]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/etbuild-llm-bench"))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--flows", nargs="+", choices=["etbuild", "export_llm"], default=["etbuild", "export_llm"])
    parser.add_argument("--max-prefill", type=int, default=128, help="ours: longest chunk one call takes")
    parser.add_argument("--attention", choices=["portable", "custom"], default="custom", help="ours: llm.attention")
    args = parser.parse_args()
    folder = args.work / "checkpoint"
    config = checkpoint(folder)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    text = ("the quick brown fox jumps over the lazy dog " * 40)
    prompt_text = tokenizer.decode(tokenizer.encode(text).ids[: args.prompt])
    hf = decoder(path=str(folder), max_context=CONTEXT, max_prefill=1).decoder.model
    generator = torch.Generator().manual_seed(0)
    sequence = torch.randint(3, config["vocab_size"], (128,), generator=generator).tolist()
    with torch.no_grad():
        reference = torch.stack([hf(torch.tensor([sequence[: i + 1]])).logits[0, -1]
                                 for i in range(len(sequence))]).numpy()
    expected = hf_greedy(hf, sequence[:8], 32)
    rows = []
    for setting in args.settings:
        for flow in args.flows:
            if flow == "etbuild":
                pte, seconds = build_ours(args.work / flow, folder, setting, args.max_prefill, args.attention)
            else:
                pte, seconds = build_export_llm(args.work / flow, folder, setting)
            logits, greedy = forward_checks(pte, sequence, 8, 32, args.work)
            speed = runner_speed(pte, folder / "tokenizer.json", prompt_text, args.tokens)
            rows.append({
                "setting": setting, "flow": flow, "build_s": round(seconds, 1), "pte_bytes": pte.stat().st_size,
                "greedy_match": sum(a == b for a, b in zip(greedy, expected)),
                "agreement": round(float(np.mean(logits.argmax(-1) == reference.argmax(-1))), 4),
                "prefill_tok_s": speed["prefill_token_per_sec"], "decode_tok_s": speed["decode_token_per_sec"],
                "prompt_tokens": speed["prompt_tokens"], "generated_tokens": speed["generated_tokens"],
                "load_average": Path("/proc/loadavg").read_text().split()[:3],
            })
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
