"""ExecuTorch's LLM programs (export_llm: KV cache, custom SDPA, XNNPACK; fp32 and 8da4w) in our runtime and in
ExecuTorch's, one thread, each runtime in a fresh process.

    python benchmarks/llm_runtime.py [--models base,wide] [--forms fp32,8da4w] [--prompt 64] [--new 64]
                                     [--repeat 3] [--flows export_llm,etbuild] [--json out.json]

Per model (seeded random Llama-3-shaped checkpoints in Meta's layout, built by export_llm through
etbuild.verify.export_llm and cached) and form, a child process per runtime loads the `.pte`, prefills a fixed
prompt in one call (tok/s), decodes --new tokens greedily, one call each (tok/s; no stop at EOS), then feeds a
fixed sequence one token at a time from position 0 for the teacher-forced next tokens. Both children drive
`forward` with the same Python loop (etbuild.tools.runner.Runner): the comparison is of the runtimes, not of the
loops. A third child runs eager Hugging Face `generate` (greedy, static cache) on the float model of the same
checkpoint (LlamaForCausalLM, or Qwen3ForCausalLM for the `qwen3` class: `hf_model`). The table gives the rates,
the ratio ours/theirs (of wall-clock rates, and of the process's CPU time per decode call, which other processes'
load moves less), how many greedy tokens are equal before the first difference (ours against ExecuTorch's and
against Hugging Face's), and the teacher-forced agreement.
With `--flows etbuild` the program is our own recipe's instead (issue 26: our LLM programs meet the same lines):
the same checkpoint in Hugging Face's layout, `model.llm` with `llm.attention: custom`, XNNPACK, and for 8da4w
export_llm's settings (group 32, 4-bit embeddings), built by `etbuild build` under the cache folder.

    python benchmarks/llm_runtime.py child RUNTIME PTE PROMPT NEW      (one child; prints one JSON line)
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = {
    # ≥ 20 M parameters (issue 26): vocab 8192, width 512, 4 layers, GQA 8/2 heads, SwiGLU 1536.
    "base": dict(dim=512, n_layers=4, n_heads=8, n_kv_heads=2, vocab_size=8192, hidden_dim=1536,
                 max_seq_len=256, max_context_len=256),
    # a second size (no second model class: see docs/llm.md): width 768, 3 layers, GQA 12/4 heads, SwiGLU 2048
    "wide": dict(dim=768, n_layers=3, n_heads=12, n_kv_heads=4, vocab_size=8192, hidden_dim=2048,
                 max_seq_len=256, max_context_len=256),
    # a second model class: Qwen3's layout (q/k RMSNorm per head), 20.5 M parameters
    "qwen3": dict(dim=512, n_layers=4, n_heads=8, n_kv_heads=2, vocab_size=8192, hidden_dim=1536,
                  max_seq_len=256, max_context_len=256, model_class="qwen3_0_6b", qk_norm=True),
    # the tests' tiny model: per-call overhead only
    "tiny": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=320, hidden_dim=128,
                 max_seq_len=160, max_context_len=160),
}
TEACHER_FORCED = 128


def one_thread() -> None:
    """One thread for numpy's BLAS, torch and ExecuTorch's threadpool (set before they start)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"


def child(runtime: str, pte: str, prompt_len: int, new: int) -> dict[str, Any]:
    """Load, prefill, decode and teacher-force `pte` in `runtime`; rates, tokens and next tokens."""
    from threadpoolctl import threadpool_limits

    from etbuild.tools.runner import Runner

    threadpool_limits(1)  # numpy's BLAS was loaded before one_thread() could set its environment
    t = time.perf_counter()
    if runtime == "etbuild":
        from etbuild.tools.runner import load_runner

        runner = load_runner(pte)
    else:
        import torch
        from executorch.extension.pybindings import _C

        torch.set_num_threads(1)
        _C._unsafe_reset_threadpool(1)
        from etbuild.tools.textgen import executorch_runner

        runner = executorch_runner(Path(pte))
    load_s = time.perf_counter() - t
    vocab = 3, 256
    prompt = [int(x) for x in np.random.default_rng(0).integers(*vocab, prompt_len)]
    runner.feed(prompt[:8])  # warm-up: first calls bind, compile and fault pages in
    runner.feed([5])
    runner.position = 0
    cpu: list[float] = []  # the process's CPU seconds of each one-token call (less sensitive to load than wall time)

    def forward(tokens: np.ndarray, position: np.ndarray) -> Any:
        start = time.process_time()
        logits = runner.forward(tokens, position)
        if tokens.shape[1] == 1:
            cpu.append(time.process_time() - start)
        return logits

    timed = Runner(forward, dataclasses.replace(runner.contract, eos_ids=()))  # all `new` tokens, no EOS stop
    tokens = list(timed.generate(prompt, new))
    stats = timed.stats
    cpu = cpu[-(new - 1):] if new > 1 else []  # the decode calls (a one-token-a-call prefill came before them)
    sequence = [int(x) for x in np.random.default_rng(1).integers(*vocab, TEACHER_FORCED)]
    runner.position = 0
    forced = [int(np.argmax(runner.feed([tok]))) for tok in sequence]
    return {"load_s": load_s, "prefill_tps": stats.prefill_tokens_per_s, "decode_tps": stats.decode_tokens_per_s,
            "decode_cpu_tps": len(cpu) / sum(cpu) if sum(cpu) > 0 else float("nan"), "tokens": tokens, "forced": forced}


def hf_child(pte: str, prompt_len: int, new: int) -> dict[str, Any]:
    """Eager Hugging Face `generate` (greedy, static cache) on the float model of `pte`'s checkpoint, one thread:
    prefill as the time of a 1-token generate, decode as the rest of a `new`-token one."""
    import torch

    torch.set_num_threads(1)
    model = hf_model(next(d for d in Path(pte).parents if (d / "params.json").is_file()))  # ours: under it
    prompt = torch.tensor([[int(x) for x in np.random.default_rng(0).integers(3, 256, prompt_len)]])

    def timed(count: int) -> tuple[float, list[int]]:
        t = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=count, min_new_tokens=count, do_sample=False,
                             cache_implementation="static", pad_token_id=0)
        return time.perf_counter() - t, out[0, prompt_len:].tolist()

    timed(2)  # warm-up
    prefill_s, _ = timed(1)
    total_s, tokens = timed(new)
    return {"prefill_tps": prompt_len / prefill_s, "decode_tps": (new - 1) / (total_s - prefill_s), "tokens": tokens}


def hf_model(folder: Path) -> Any:
    """transformers' model of the Meta-layout checkpoint in `folder`: LlamaForCausalLM, or Qwen3ForCausalLM when its
    params use q/k norms (export_llm's `qwen3_0_6b` class), q and k rows permuted back into Hugging Face's
    rotate-half order (../shared/LLM.md; a per-head RMSNorm is blind to the order within its head)."""
    import importlib

    import torch

    importlib.import_module("tests.models.zoo")  # first: lets transformers import torchvision without its C ext
    transformers = importlib.import_module("transformers")
    params = json.loads((folder / "params.json").read_text())
    meta = torch.load(folder / "meta.pth", weights_only=True)
    heads, kv = params["n_heads"], params["n_kv_heads"]
    qk_norm = bool(params.get("use_qk_norm"))
    family = "Qwen3" if qk_norm else "Llama"
    extra = {"head_dim": params["dim"] // heads, "attention_bias": False} if qk_norm else {}
    config = getattr(transformers, f"{family}Config")(
        vocab_size=params["vocab_size"], hidden_size=params["dim"], intermediate_size=params["hidden_dim"],
        num_hidden_layers=params["n_layers"], num_attention_heads=heads, num_key_value_heads=kv,
        rms_norm_eps=params["norm_eps"], rope_theta=params["rope_theta"], max_position_embeddings=1024,
        tie_word_embeddings=False, **extra)

    def to_hf(w: torch.Tensor, n: int) -> torch.Tensor:
        rows, cols = w.shape
        return w.view(n, rows // n // 2, 2, cols).transpose(1, 2).reshape(rows, cols)

    names = {"attention.wo": "self_attn.o_proj", "attention.wv": "self_attn.v_proj", "feed_forward.w1": "mlp.gate_proj",
             "feed_forward.w2": "mlp.down_proj", "feed_forward.w3": "mlp.up_proj",
             "attention_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
    if qk_norm:
        names |= {"attention.q_norm_fn": "self_attn.q_norm", "attention.k_norm_fn": "self_attn.k_norm"}
    state = {"model.embed_tokens.weight": meta["tok_embeddings.weight"], "model.norm.weight": meta["norm.weight"],
             "lm_head.weight": meta["output.weight"]}
    for i in range(params["n_layers"]):
        p, h = f"layers.{i}.", f"model.layers.{i}."
        state[h + "self_attn.q_proj.weight"] = to_hf(meta[p + "attention.wq.weight"], heads)
        state[h + "self_attn.k_proj.weight"] = to_hf(meta[p + "attention.wk.weight"], kv)
        state |= {h + ours + ".weight": meta[p + theirs + ".weight"] for theirs, ours in names.items()}
    model = getattr(transformers, f"{family}ForCausalLM")(config).eval()
    model.load_state_dict(state, strict=True)
    return model


def run_child(runtime: str, pte: Path, prompt_len: int, new: int) -> dict[str, Any]:
    argv = [sys.executable, str(Path(__file__).resolve()), "child", runtime, str(pte), str(prompt_len),
            str(new)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{runtime} child failed on {pte}: {proc.stderr.strip().splitlines()[-3:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def best_of(runtimes: tuple[str, ...], pte: Path, prompt_len: int, new: int, repeat: int) -> list[dict[str, Any]]:
    """Each runtime's child run `repeat` times, the order rotating round by round (load from elsewhere hits each
    alike); per runtime the run with the best decode rate, its prefill rate the best of its runs."""
    runs: dict[str, list[dict[str, Any]]] = {r: [] for r in runtimes}
    for k in range(repeat):
        for r in runtimes[k % len(runtimes):] + runtimes[:k % len(runtimes)]:
            runs[r].append(run_child(r, pte, prompt_len, new))
    best = [max(runs[r], key=lambda x: x["decode_tps"]) for r in runtimes]
    return [{**b, "prefill_tps": max(x["prefill_tps"] for x in runs[r]),
             "decode_cpu_tps": max(x.get("decode_cpu_tps", float("nan")) for x in runs[r])}
            for b, r in zip(best, runtimes)]


OUR_QUANTIZE = {"scheme": "int8-dynamic-int4-weight", "group_size": 32, "embeddings": "int4"}  # export_llm's 8da4w


def recipe_program(checkpoint: Path, form: str, context: int) -> Path:
    """Our recipe's `.pte` of export_llm's checkpoint folder (Meta layout) in `form` with a KV cache of `context`
    positions, built under the folder."""
    import io

    from etbuild.build.driver import build
    from etbuild.errors import StageError
    from tests.llm_support import write_llm_recipe

    hf = checkpoint / "hf"
    if not (hf / "config.json").exists():
        hf_model(checkpoint).save_pretrained(hf)
    name = f"etbuild-{form}"
    sections: dict[str, Any] = {"llm": {"attention": "custom"}, "backends": [{"name": "xnnpack"}]}
    if form == "8da4w":
        sections |= {"quantize": OUR_QUANTIZE, "verify": {"agreement": 0.0}}  # agreement is measured here
    recipe = write_llm_recipe(checkpoint, name, {"path": "hf", "max_context": context, "max_prefill": 1}, **sections)
    result = build([recipe], checkpoint / "build", stream=io.StringIO())
    if result.exit_code:
        raise StageError(f"etbuild build of {recipe} failed: {result.failed}")
    return checkpoint / "build" / name / f"{name}.pte"


def measure(model: str, form: str, prompt_len: int, new: int, repeat: int = 1,
            flow: str = "export_llm") -> dict[str, Any]:
    from etbuild.verify.export_llm import LlamaShape, export_llm

    shape = LlamaShape(**MODELS[model])
    t = time.perf_counter()
    pte = export_llm(shape, form)
    if flow == "etbuild":
        if shape.qk_norm:
            raise ValueError(f"{model}: --flows etbuild needs a Llama checkpoint (our recipe builds it from Hugging "
                             "Face's Llama folder)")
        t = time.perf_counter()
        pte = recipe_program(pte.parent, form, shape.max_context_len)
    build_s = time.perf_counter() - t
    ours, theirs, hf = best_of(("etbuild", "executorch", "hf"), pte, prompt_len, new, repeat)
    agree = float(np.mean(np.asarray(ours["forced"]) == np.asarray(theirs["forced"])))
    pairs = enumerate(zip(ours["tokens"], theirs["tokens"]))
    equal = next((k for k, (a, b) in pairs if a != b), new)  # greedy tokens before the first difference
    return {"model": model, "form": form, "flow": flow, "parameters": shape.parameters, "pte_bytes": pte.stat().st_size,
            "build_s": build_s, "ours": ours, "theirs": theirs, "hf": hf, "greedy_equal": equal, "new": new,
            "hf_equal": next((k for k, (a, b) in enumerate(zip(ours["tokens"], hf["tokens"])) if a != b),
                             len(hf["tokens"])),
            "forced_agreement": agree}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | form | program | params | .pte MB | prefill tok/s ours / ET | decode tok/s ours / ET "
             "| decode ratio | ratio by CPU time | HF decode tok/s | greedy equal ET / HF | teacher-forced agreement |",
             "|" + "---|" * 12]
    for r in rows:
        o, t = r["ours"], r["theirs"]
        lines.append(f"| {r['model']} | {r['form']} | {r['flow']} | {r['parameters'] / 1e6:.1f} M | "
                     f"{r['pte_bytes'] / 1e6:.1f} | "
                     f"{o['prefill_tps']:.0f} / {t['prefill_tps']:.0f} | {o['decode_tps']:.1f} / "
                     f"{t['decode_tps']:.1f} | {o['decode_tps'] / t['decode_tps']:.2f} | "
                     f"{o['decode_cpu_tps'] / t['decode_cpu_tps']:.2f} | {r['hf']['decode_tps']:.1f} | "
                     f"{r['greedy_equal']} / {r['hf_equal']} of {r['new']} | {r['forced_agreement']:.1%} |")
    return "\n".join(lines)


def main() -> None:
    one_thread()
    if len(sys.argv) == 6 and sys.argv[1] == "child":
        run = hf_child if sys.argv[2] == "hf" else functools.partial(child, sys.argv[2])
        print(json.dumps(run(sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="base")
    p.add_argument("--forms", default="fp32,8da4w")
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--repeat", type=int, default=1, help="children per runtime, order rotating; the best run counts")
    p.add_argument("--flows", default="export_llm", help="whose program: export_llm, etbuild (our recipe's) or both")
    p.add_argument("--json")
    args = p.parse_args()
    from etbuild.errors import StageError

    rows, failed = [], []
    for m in args.models.split(","):
        for f in args.forms.split(","):
            for flow in args.flows.split(","):
                try:
                    rows.append(measure(m, f, args.prompt, args.new, args.repeat, flow))
                except StageError as exc:  # a build failed (export_llm's now and then): say so, measure the rest
                    failed.append(f"{m} {f} {flow}: {str(exc).splitlines()[-3:]}")
    print(f"loadavg before the table: {Path('/proc/loadavg').read_text().split()[:3]}")
    print(table(rows))
    print("\n".join(f"not built: {line}" for line in failed))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
