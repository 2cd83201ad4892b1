"""etbuild.runtime.format.mirror: every schema's Python types mirror it field for field, typed, and the check
names what does not."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from etbuild.backends.xnnpack.format import graph
from etbuild.devtools import bundle_format, etdump_format
from etbuild.runtime.format import flat_tensor, program
from etbuild.runtime.format.fbs import load_schema, parse_schema
from etbuild.runtime.format.mirror import mirror, mismatches
from etbuild.schema import SCHEMA_DIR


@pytest.mark.parametrize(("schema_file", "types"), [
    ("program.fbs", program.TABLE_TYPES), ("flat_tensor.fbs", flat_tensor.TYPES), ("xnnpack.fbs", graph.MIRROR_TYPES),
    ("etdump.fbs", etdump_format.TYPES), ("bundled_program.fbs", bundle_format.TYPES),
])
def test_every_schema_is_mirrored_field_for_field(schema_file: str, types: dict[str, type]) -> None:
    assert mismatches(load_schema(SCHEMA_DIR / schema_file), types) == []


SCHEMA = parse_schema("""
table Leaf { n: int = 3; }
union Choice { Leaf }
table Root { name: string; leaf: Leaf; items: [Leaf]; raw: [ubyte]; scale: float; pick: Choice; }
root_type Root;
""")


@dataclass(slots=True)
class Leaf:
    n: int = 3


def _root(**changes: object) -> type:
    """A mirror of Root, with some fields declared otherwise."""
    fields = {"name": ("str | None", None), "leaf": ("Leaf | None", None), "items": ("list[Leaf]", list),
              "raw": ("bytes", bytes), "scale": ("float", 0.0), "pick": ("Leaf | None", None), **changes}
    body = {"__annotations__": {k: t for k, (t, _) in fields.items()}}
    body |= {k: field(default_factory=d) if callable(d) else d for k, (_, d) in fields.items()}
    return dataclass(slots=True)(type("Root", (), body))


def test_a_faithful_mirror_passes_and_an_optional_vector_may_default_to_none() -> None:
    assert mismatches(SCHEMA, mirror(Leaf, _root())) == []
    assert mismatches(SCHEMA, mirror(Leaf, _root(items=("list[Leaf] | None", None)))) == []


def test_each_disagreement_is_named() -> None:
    assert mismatches(SCHEMA, mirror(_root())) == ["Leaf: no dataclass mirrors it"]
    wrong_default = dataclass(slots=True)(type("Leaf", (), {"__annotations__": {"n": "int"}, "n": 0}))
    assert mismatches(SCHEMA, mirror(wrong_default, _root())) == [
        "Leaf.n: declared int = 0; the schema's scalar int = 3 takes int"]
    assert mismatches(SCHEMA, mirror(Leaf, _root(scale=("int", 0)))) == [
        "Root.scale: declared int = 0; the schema's scalar float = 0.0 takes float"]
    assert mismatches(SCHEMA, mirror(Leaf, _root(raw=("list[int]", list)))) == [
        "Root.raw: declared list[int] = []; the schema's [scalar ubyte] = 0 takes bytes"]
    assert mismatches(SCHEMA, mirror(Leaf, _root(leaf=("Leaf", None)))) == [
        "Root.leaf: declared Leaf = None; the schema's table Leaf = 0 takes Leaf | None"]
    extra = dataclass(slots=True)(type("Root", (), {"__annotations__": {"name": "str | None"}, "name": None}))
    assert mismatches(SCHEMA, mirror(Leaf, extra))[0].startswith("Root: fields ['name'], schema ['name', 'leaf'")
    assert mismatches(SCHEMA, mirror(Leaf, _root(), type("Stray", (), {}))) == ["Stray: a type of no table"]
