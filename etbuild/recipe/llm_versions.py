"""The transformers releases `model.llm` builds with, checked when a recipe is loaded (torch-free, no import).

What the build takes from transformers is small (`etbuild.llm.custom_attention`, `runner`, `checkpoint`): the
architectures' model and config classes, `AttentionInterface.register` and the attention-function contract,
`position_ids`/`logits_to_keep`, and for `attention: portable` `integrations.executorch.
TorchExportableModuleWithStaticCache`. Both ends of `SUPPORTED` pass every `model.llm` test
(`.ci/llm-transformers-ends`); a release outside it is a recipe error naming the range, not a TypeError
mid-export (5.24 changed the cache's `update` call, which the build no longer uses).
"""

from __future__ import annotations

import re
from importlib import metadata

OLDEST = "5.0.0"
"""The oldest release tested. The last 4.x, 4.57.6, builds float and int8-cache programs alike but fails the GPTQ
search's float-layer swap on a custom-attention model (torch.fx: `references nonexistent attribute submod_1` in
torchao's DuplicateDQPass at convert)."""
NEWEST = "5.24"
"""The newest minor release tested: its patch releases are accepted, the next minor release is not."""
SUPPORTED = f"{OLDEST} … {NEWEST}.x"


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string (`5.24.0.dev0` → (5, 24, 0)); () when it has none."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def installed() -> str | None:
    """The installed transformers version, or None."""
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None


def problem(version: str | None) -> str | None:
    """Why `version` of transformers cannot build a `model.llm` recipe, or None when it can."""
    if version is None:
        return f"expected transformers {SUPPORTED} installed (pip install 'etbuild[llm]'); it is not installed"
    number = release(version)
    if release(OLDEST) <= number and number[:2] <= release(NEWEST):
        return None
    return (f"expected transformers {SUPPORTED}, the releases etbuild supports (pip install 'etbuild[llm]'); "
            f"{version} is installed")
