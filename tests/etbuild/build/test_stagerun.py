"""Stages through a shared cache: a fresh build tree fetches every stage, a corrupt entry is rebuilt."""

from __future__ import annotations

import hashlib
import io
import json
import re

from etbuild.build.driver import build
from etbuild.cache import open_cache
from etbuild.cache.cache import blob_name
from tests.etbuild.build.test_driver import RECIPE, STAGES


def test_a_fresh_tree_fetches_every_stage_and_a_corrupt_entry_is_rebuilt(tmp_path):
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(RECIPE)
    cache = open_cache(str(tmp_path / "cache"))
    first = build([recipe], tmp_path / "b1", stream=io.StringIO(), cache=cache)
    assert first.rebuilt == STAGES and set(first.cache.values()) == {"miss"}
    out = io.StringIO()
    second = build([recipe], tmp_path / "b2", stream=out, cache=cache)
    assert (second.executed, second.rebuilt, set(second.cache.values())) == (STAGES, [], {"hit"})
    assert re.search(r"\n  plan:tiny +\.\.\. +[0-9.]+ s \(cached\)\n", out.getvalue())
    for name in ("tiny.pte", "verify.json", "runtime/etbuild/kernels/selected.py", "runtime/tiny-runtime.zip"):
        assert (tmp_path / "b1" / "tiny" / name).read_bytes() == (tmp_path / "b2" / "tiny" / name).read_bytes()
    pte_digest = json.loads(cache.store.get(f"ac/{second_key(tmp_path, 'emit')}.json"))["files"]["tiny.pte"]
    (tmp_path / "cache" / blob_name(pte_digest)).write_bytes(b"not a program")
    third = build([recipe], tmp_path / "b3", stream=io.StringIO(), cache=cache)
    assert third.exit_code == 0 and third.rebuilt == ["emit:tiny"] and third.cache["emit:tiny"] == "corrupt"
    assert third.notes == [f"cache entry {second_key(tmp_path, 'emit')[:16]} of emit:tiny was corrupt (blob "
                           f"{pte_digest} holds bytes with sha256 {_sha(b'not a program')}): discarded and rebuilt"]
    fourth = build([recipe], tmp_path / "b4", stream=io.StringIO(), cache=cache)
    assert fourth.rebuilt == [] and (tmp_path / "b4" / "tiny" / "tiny.pte").read_bytes()[4:8] == b"ET12"


def second_key(tmp_path, stage: str) -> str:
    """The key a build of tmp_path/tiny.yaml records for `stage` in its doit values."""
    from etbuild.build.layout import Artifacts
    from etbuild.build.stage_table import stage_calls
    from etbuild.build.stagerun import StageRunner
    from etbuild.cache import versions
    from etbuild.recipe import load_recipe

    recipe = load_recipe(tmp_path / "tiny.yaml")
    return StageRunner(versions()).key(stage_calls(recipe, Artifacts.of(recipe, tmp_path / "b2"))[stage])


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
