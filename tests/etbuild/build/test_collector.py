"""The garbage collector's schedule in a build process (etbuild.build.collector)."""

from __future__ import annotations

import gc
import sys
import weakref

import pytest

from etbuild.build import collector


class Node:
    """An object that can sit in a reference cycle and be watched through a weak reference."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    """A two-object reference cycle nothing else holds; a weak reference to one of them."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture(autouse=True)
def fresh_schedule(monkeypatch):
    gc.collect()
    collector._ran.clear()
    monkeypatch.setattr(collector, "_blocks_after_pass", 0)  # grown since: a boundary makes its pass
    yield
    gc.unfreeze()
    collector._ran.clear()


@pytest.mark.parametrize("enabled", [True, False])
def test_paused_restores_the_collector_as_it_was(enabled):
    (gc.enable if enabled else gc.disable)()
    try:
        with collector.paused():
            assert not gc.isenabled()
            watched = cycle()
            gc.collect(0)  # an explicit pass still runs; only automatic ones pause
        assert gc.isenabled() is enabled
        assert watched() is None
    finally:
        gc.enable()


def test_a_stage_freezes_older_objects_and_unfreezes_them_after():
    before = cycle()
    with collector.stage_scope("build/a", "export"):
        assert gc.get_freeze_count() > 0
        gc.collect()
        assert before() is not None  # frozen: not walked by the stage's passes
        made = cycle()
        gc.collect()
        assert made() is None  # the stage's own cycles are collected
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert before() is None


def test_another_recipe_starts_with_a_full_pass():
    with collector.stage_scope("build/a", "export"):
        left = cycle()
    with collector.stage_scope("build/a", "lower"):
        assert left() is not None  # same recipe: no full pass between its stages
    with collector.stage_scope("build/b", "export"):
        assert left() is None


def test_a_boundary_makes_no_pass_unless_the_process_grew_by_a_quarter(monkeypatch):
    with collector.stage_scope("build/a", "export"):
        left = cycle()
    monkeypatch.setattr(collector, "_blocks_after_pass", sys.getallocatedblocks())
    with collector.stage_scope("build/b", "export"):
        assert left() is not None  # CPython's own rule would not walk the old objects either
    monkeypatch.setattr(collector, "_blocks_after_pass", int(sys.getallocatedblocks() / collector.GROWTH))
    with collector.stage_scope("build/c", "export"):
        assert left() is None
    assert collector._blocks_after_pass == pytest.approx(sys.getallocatedblocks(), rel=0.01)


def test_a_stage_run_again_starts_with_a_full_pass():
    with collector.stage_scope("build/a", "export"):
        left = cycle()
    with collector.stage_scope("build/a", "export"):
        assert left() is None


def test_a_scope_leaves_a_collector_frozen_by_someone_else_frozen(monkeypatch):
    gc.freeze()
    calls = []  # the count itself falls when a frozen object is freed, so the scope's calls are what is checked
    monkeypatch.setattr(collector.gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(collector.gc, "unfreeze", lambda: calls.append("unfreeze"))
    with collector.stage_scope("build/a", "export"):
        pass
    assert calls == []
    assert gc.get_freeze_count() > 0
