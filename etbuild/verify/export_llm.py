"""ExecuTorch's `export_llm` on a seeded random Llama-3-shaped checkpoint: the LLM programs the runtime is tested on.

The checkpoint is Meta's layout (`params.json` + a `.pth` state dict, see ../shared/LLM.md); export_llm runs in a
subprocess (`python -m executorch.extension.llm.export.export_llm --config cfg.yaml`) with the KV cache, the custom
SDPA and XNNPACK, float32 or 8da4w. Results are cached by a hash of every setting (and the executorch version), so
a test session or a benchmark builds each program once. `executorch` is the oracle extra: only this module's
subprocess imports it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from etbuild.errors import StageError, UsageError

QMODES = {
    "fp32": {},
    "8da4w": {"qmode": "8da4w", "group_size": 32, "embedding_quantize": "4,32"},
    "fp32-kv8": {},
}
"""The quantization settings of each program form export_llm builds (its `quantization:` section)."""
MODEL_SETTINGS = {"fp32-kv8": {"quantize_kv_cache": True}}
"""The forms' settings of its `model:` section besides the KV cache and custom SDPA: `fp32-kv8` is the int8 KV
cache (`llama::custom_quantized_sdpa` over int8 caches with per-token scales and zero points)."""


@dataclass(frozen=True)
class LlamaShape:
    """A Llama-3-shaped decoder: the fields of Meta's `params.json`, the program's bounds and its token ids."""

    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 320
    hidden_dim: int = 128
    max_seq_len: int = 64
    max_context_len: int = 64
    bos_id: int = 1
    eos_ids: tuple[int, ...] = (2,)
    seed: int = 0
    model_class: str = "llama3_2"
    qk_norm: bool = False  # Qwen3's RMSNorm of each head's q and k before the rotary embedding

    @property
    def parameters(self) -> int:
        """The number of weights (embedding, attention, MLP, norms, output head)."""
        head = self.dim // self.n_heads
        attention = self.dim * head * (2 * self.n_heads + 2 * self.n_kv_heads)
        layer = attention + 3 * self.dim * self.hidden_dim + 2 * self.dim + (2 * head if self.qk_norm else 0)
        return 2 * self.vocab_size * self.dim + self.n_layers * layer + self.dim

    def params_json(self) -> dict[str, object]:
        """Meta's `params.json` for this shape."""
        return {"dim": self.dim, "n_layers": self.n_layers, "n_heads": self.n_heads, "n_kv_heads": self.n_kv_heads,
                "vocab_size": self.vocab_size, "hidden_dim": self.hidden_dim, "norm_eps": 1e-5,
                "rope_theta": 500000.0, "use_scaled_rope": False,
                **({"use_qk_norm": True, "qk_norm_before_rope": True} if self.qk_norm else {})}


def write_checkpoint(shape: LlamaShape, folder: Path) -> tuple[Path, Path]:
    """Write `params.json` and `meta.pth` (seeded normal weights, scaled by 1/sqrt(fan-in); unit norms) into folder."""
    import torch

    g = torch.Generator().manual_seed(shape.seed)

    def weight(rows: int, cols: int) -> torch.Tensor:
        return torch.randn(rows, cols, generator=g) / cols**0.5

    d, head = shape.dim, shape.dim // shape.n_heads
    state = {"tok_embeddings.weight": torch.randn(shape.vocab_size, d, generator=g),
             "norm.weight": torch.ones(d), "output.weight": weight(shape.vocab_size, d)}
    for i in range(shape.n_layers):
        p = f"layers.{i}."
        state |= {p + "attention.wq.weight": weight(shape.n_heads * head, d),
                  p + "attention.wk.weight": weight(shape.n_kv_heads * head, d),
                  p + "attention.wv.weight": weight(shape.n_kv_heads * head, d),
                  p + "attention.wo.weight": weight(d, shape.n_heads * head),
                  p + "feed_forward.w1.weight": weight(shape.hidden_dim, d),
                  p + "feed_forward.w2.weight": weight(d, shape.hidden_dim),
                  p + "feed_forward.w3.weight": weight(shape.hidden_dim, d),
                  p + "attention_norm.weight": torch.ones(d), p + "ffn_norm.weight": torch.ones(d)}
        if shape.qk_norm:
            state |= {p + f"attention.{qk}_norm_fn.weight": torch.ones(head) for qk in "qk"}
    params, checkpoint = folder / "params.json", folder / "meta.pth"
    params.write_text(json.dumps(shape.params_json()))
    torch.save(state, checkpoint)
    return params, checkpoint


def export_config(shape: LlamaShape, qmode: str, params: Path, checkpoint: Path, output: Path) -> dict[str, object]:
    """export_llm's configuration (its hydra YAML, as a dict) for this shape and program form."""
    if qmode not in QMODES:
        raise UsageError(f"export_llm form {qmode!r}: expected one of {', '.join(QMODES)}")
    metadata = json.dumps({"get_bos_id": shape.bos_id, "get_eos_ids": list(shape.eos_ids)})
    config: dict[str, object] = {
        "base": {"model_class": shape.model_class, "params": str(params), "checkpoint": str(checkpoint),
                 "metadata": metadata},
        "model": {"use_kv_cache": True, "use_sdpa_with_kv_cache": True, "dtype_override": "fp32",
                  **MODEL_SETTINGS.get(qmode, {})},
        "backend": {"xnnpack": {"enabled": True, "extended_ops": True}},
        "export": {"max_seq_length": shape.max_seq_len, "max_context_length": shape.max_context_len,
                   "output_dir": str(output.parent), "output_name": output.name},
    }
    if QMODES[qmode]:
        config["quantization"] = dict(QMODES[qmode])
    return config


def cache_key(shape: LlamaShape, qmode: str) -> str:
    """A hash of every setting that decides the program's bytes, and of the executorch version that builds it."""
    version = importlib.metadata.version("executorch")
    text = json.dumps([dataclasses.asdict(shape), qmode, QMODES.get(qmode), version], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_cache() -> Path:
    """Where built programs are kept: $ETBUILD_EXPORT_LLM_CACHE, else a folder under the system's temp dir."""
    return Path(os.environ.get("ETBUILD_EXPORT_LLM_CACHE", Path(tempfile.gettempdir()) / "etbuild-export-llm"))


def export_llm(shape: LlamaShape, qmode: str = "fp32", cache: Path | None = None) -> Path:
    """The `.pte` export_llm builds for `shape` in form `qmode` (`QMODES`), built once per cache key.

    The folder beside the `.pte` holds its checkpoint (`params.json`, `meta.pth`). Built in a temporary folder
    and renamed into place, so an interrupted build leaves nothing a later call would take for a result; a failed
    export_llm run is a StageError.
    """
    folder = (cache or default_cache()) / f"{shape.model_class}-{qmode}-{cache_key(shape, qmode)}"
    pte = folder / "model.pte"
    if pte.is_file():
        return pte
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        params, checkpoint = write_checkpoint(shape, work)
        config = export_config(shape, qmode, params, checkpoint, work / "model.pte")
        run_export_llm(config, work)
        if not pte.is_file():  # another process may have finished the same build first
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(work, folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return pte


def run_export_llm(config: dict[str, object], work: Path) -> None:
    """Run export_llm on `config` in a subprocess (cwd `work`); StageError with its last lines when it fails."""
    import yaml

    base = dict(config["base"])  # type: ignore[call-overload]
    base["checkpoint"], link = _neutral_checkpoint(Path(base["checkpoint"]), work)
    (work / "config.yaml").write_text(yaml.safe_dump({**config, "base": base}))
    argv = [sys.executable, "-m", "executorch.extension.llm.export.export_llm", "--config", "config.yaml"]
    try:
        proc = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False)
    finally:
        if link is not None:  # it would dangle once work is moved
            link.unlink(missing_ok=True)
    if proc.returncode != 0 or not (work / "model.pte").is_file():
        lines = proc.stderr.strip().splitlines()
        errors = [line for line in lines if "Error" in line and not line.startswith("W")][-3:]
        tail = "\n".join([*errors, *lines[-3:]])
        raise StageError(f"export_llm failed (exit {proc.returncode}) in {work}:\n{tail}")


PREQUANTIZED_MARKERS = ("int8", "8da4w")
"""export_llm reads a checkpoint whose path text holds one of these as already quantized in that form (its
`model.py` tests `"8da4w" in str(checkpoint_path)`): a float checkpoint there fails in torch.export with a
fake-tensor error in torchao's `dequantize_affine` (a float weight where int8 codes were expected)."""


def _neutral_checkpoint(given: Path, work: Path) -> tuple[str, Path | None]:
    """The checkpoint path to give export_llm (its cwd is `work`), and the link made for it: the path as given, or
    when it holds a marker, a link in `work` named free of them."""
    if not any(marker in str(given) for marker in PREQUANTIZED_MARKERS):
        return str(given), None
    link = work / "checkpoint.pth"
    link.unlink(missing_ok=True)
    os.symlink(given.resolve(), link)
    return link.name, link
