"""The shared cache: write-once stores (directory, S3-compatible bucket), checked reads, keys that
do not depend on the checkout's location."""

from __future__ import annotations

import shutil

import pytest

from etbuild.cache import Cache, CorruptEntry, open_cache, open_store, portable, stage_key
from etbuild.cache.cache import blob_name, entry_name
from etbuild.errors import UsageError


@pytest.fixture(params=["dir", "s3"])
def store_url(request, tmp_path):
    return str(tmp_path / "cache") if request.param == "dir" else request.getfixturevalue("s3_bucket")


def test_stores_write_each_name_once(store_url):
    store = open_store(store_url)
    assert store.get("a/b") is None
    assert store.put_once("a/b", b"first") is True
    assert store.put_once("a/b", b"second") is False
    assert store.get("a/b") == b"first"
    store.delete("a/b")
    assert store.get("a/b") is None


def test_open_store_refuses_unknown_schemes():
    with pytest.raises(UsageError, match=r"unknown scheme 'gs'; expected a directory, file:// or s3://"):
        open_store("gs://bucket")


def test_outputs_round_trip_files_and_trees(store_url, tmp_path):
    cache = open_cache(store_url)
    root = tmp_path / "a"
    (root / "tree" / "sub").mkdir(parents=True)
    (root / "tree" / "sub" / "m.py").write_text("m")
    (root / "out.bin").write_bytes(b"\x01\x02")
    entry = cache.save("k" * 64, "select", root, [root / "out.bin", root / "tree"])
    assert entry.dirs == ("tree",) and sorted(entry.files) == ["out.bin", "tree/sub/m.py"]
    other = tmp_path / "b"
    (other / "tree").mkdir(parents=True)
    (other / "tree" / "stale.py").write_text("s")
    assert cache.restore("k" * 64, other) == entry
    assert (other / "out.bin").read_bytes() == b"\x01\x02"
    assert sorted(p.name for p in (other / "tree").rglob("*")) == ["m.py", "sub"]
    assert cache.restore("0" * 64, other) is None


def test_a_stage_without_its_outputs_is_not_cached(tmp_path):
    cache = open_cache(str(tmp_path / "cache"))
    with pytest.raises(Exception, match="plan finished without writing"):
        cache.save("k" * 64, "plan", tmp_path, [tmp_path / "plan.json"])
    assert cache.lookup("k" * 64) is None


def test_an_altered_blob_is_corrupt_and_discarding_lets_it_be_stored_again(tmp_path):
    cache = Cache(open_store(str(tmp_path / "cache")))
    (tmp_path / "x").write_bytes(b"good")
    entry = cache.save("k" * 64, "emit", tmp_path, [tmp_path / "x"])
    blob = tmp_path / "cache" / blob_name(entry.files["x"])
    blob.write_bytes(b"evil")
    with pytest.raises(CorruptEntry, match=r"holds bytes with sha256 [0-9a-f]{64}") as err:
        cache.restore("k" * 64, tmp_path / "elsewhere")
    assert not (tmp_path / "elsewhere" / "x").exists()  # nothing written before every blob checked
    cache.discard("k" * 64, err.value)
    assert cache.lookup("k" * 64) is None and not blob.exists()
    cache.save("k" * 64, "emit", tmp_path, [tmp_path / "x"])
    assert cache.restore("k" * 64, tmp_path / "again") is not None


def test_an_entry_that_does_not_parse_is_corrupt(tmp_path):
    cache = open_cache(str(tmp_path))
    cache.store.put_once(entry_name("k" * 64), b"{not json")
    with pytest.raises(CorruptEntry, match="does not parse"):
        cache.lookup("k" * 64)


def test_keys_replace_file_paths_by_their_digests():
    files = {"/a/checkout/models/m.py": "d1", "/a/checkout/models/m.py.ops": "d2"}
    section = {"factory": "/a/checkout/models/m.py:make", "allow": ["@/a/checkout/models/m.py.ops", "aten::*"]}
    assert portable(section, files) == {"factory": "sha256:d1:make", "allow": ["@sha256:d2", "aten::*"]}
    key = stage_key("select", {"torch": "2"}, {"operators": section}, {"x.pte": "d3"})
    assert len(key) == 64 and key != stage_key("select", {"torch": "3"}, {"operators": section}, {"x.pte": "d3"})
    assert key != stage_key("select", {"torch": "2"}, {"operators": section}, {"x.pte": "d4"})


def test_stage_keys_are_the_same_in_two_checkouts(tmp_path):
    from etbuild.build.layout import Artifacts
    from etbuild.build.stage_table import stage_calls
    from etbuild.build.stagerun import StageRunner
    from etbuild.cache import versions
    from etbuild.recipe import load_recipe

    src = tmp_path / "one"
    src.mkdir()
    (src / "m.py").write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 2)\n")
    (src / "ops.txt").write_text("aten::addmm.out\n")
    (src / "r.yaml").write_text("name: r\nmodel:\n  factory: m.py:make\n  inputs: [{shape: [1, 4], dtype: float32}]\n"
                                "operators: {allow: ops.txt}\n")
    shutil.copytree(src, tmp_path / "two")
    runner = StageRunner(versions())
    keys = []
    for checkout in ("one", "two"):
        recipe = load_recipe(tmp_path / checkout / "r.yaml")
        calls = stage_calls(recipe, Artifacts.of(recipe, tmp_path / checkout / "build"))
        keys.append({stage: runner.key(call) for stage, call in calls.items()})
    assert keys[0] == keys[1]
    (tmp_path / "two" / "ops.txt").write_text("aten::*\n")
    recipe = load_recipe(tmp_path / "two" / "r.yaml")
    select = stage_calls(recipe, Artifacts.of(recipe, tmp_path))["select"]
    assert StageRunner(versions()).key(select) != keys[0]["select"]
