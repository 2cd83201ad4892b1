"""etbuild.release.config: a release file as frozen dataclasses, and the errors it can have."""

from __future__ import annotations

from pathlib import Path

import pytest

from etbuild.errors import RecipeError
from etbuild.release.config import Budget, RuntimeGroup, load_release
from tests.etbuild.release.support import TWO


def test_a_release_loads_products_budgets_and_the_default_runtime(release_file: Path) -> None:
    release = load_release(release_file)
    assert (release.name, release.version, release.dist_name) == ("pair", "2.0.0", "pair-2.0.0")
    assert [p.name for p in release.products] == ["tiny-a", "tiny-b"]
    assert release.product("tiny-a").written == "../recipes/tiny-a.yaml"
    assert release.product("tiny-a").budget == Budget(pte_bytes=2048, runtime_bytes=3000, latency_ms=1.5)
    assert release.product("tiny-b").budget == Budget()
    assert release.runtimes == (RuntimeGroup("all", ("tiny-a", "tiny-b")),)  # no `runtimes:`: one for all
    assert release.sign_key is None


def test_runtimes_of_a_product(release_file: Path) -> None:
    release_file.write_text(TWO + "runtimes:\n  - {name: a, products: [tiny-a, tiny-a]}\n"
                                  "  - {name: every, products: '*'}\n")
    release = load_release(release_file)
    assert release.runtimes[0] == RuntimeGroup("a", ("tiny-a",))  # listed twice, kept once
    assert [g.name for g in release.runtimes_of("tiny-a")] == ["a", "every"]
    assert [g.name for g in release.runtimes_of("tiny-b")] == ["every"]


def error_of(path: Path, text: str) -> str:
    path.write_text(text)
    with pytest.raises(RecipeError) as err:
        load_release(path)
    return str(err.value)


def test_a_product_listed_twice(release_file: Path) -> None:
    text = TWO + "  - recipe: ../recipes/tiny-a.yaml\n"
    assert error_of(release_file, text) == (f"{release_file}:7:5: products[2].recipe: recipe name 'tiny-a' is "
                                            "already the name of products[0]")


def test_a_runtime_name_used_twice(release_file: Path) -> None:
    text = TWO + "runtimes:\n  - {name: r, products: [tiny-a]}\n  - {name: r, products: '*'}\n"
    assert error_of(release_file, text) == (f"{release_file}:9:6: runtimes[1].name: runtime name 'r' is "
                                            "already used")


def test_a_missing_key_and_a_wrong_type_are_schema_errors(release_file: Path) -> None:
    assert "version" in error_of(release_file, TWO.replace("version: 2.0.0\n", ""))
    message = error_of(release_file, TWO.replace("latency_ms: 1.5", "latency_ms: fast"))
    assert message.startswith(f"{release_file}:5:") and "products[0].budget.latency_ms" in message
