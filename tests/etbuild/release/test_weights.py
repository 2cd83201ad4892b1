"""Weights in a release (etbuild.release.weights): what an update downloads, the download budget's key."""

from __future__ import annotations

from etbuild.release.weights import update_summary

BEFORE = {"pte": "products/p/p.pte", "weights": "weights/base.ptd",
          "download": {"products/p/p.pte": 1_600, "weights/base.ptd": 2_144_128}}


def test_a_program_only_update_downloads_the_program():
    after = {**BEFORE, "download": {"products/p/p.pte": 1_576, "weights/base.ptd": 2_144_128}}
    lines = update_summary(BEFORE, after, {"products/p/p.pte": "a", "weights/base.ptd": "w"},
                           {"products/p/p.pte": "b", "weights/base.ptd": "w"})
    assert lines == ["  update         program changed, weights unchanged: a device downloads 1,576 of 2,145,704 bytes"]


def test_changed_weights_are_downloaded_and_inside_weights_are_said():
    lines = update_summary(BEFORE, BEFORE, {"products/p/p.pte": "a", "weights/base.ptd": "w"},
                           {"products/p/p.pte": "a", "weights/base.ptd": "v"})
    assert "program unchanged, weights changed: a device downloads 2,144,128 of 2,145,728 bytes" in lines[0]
    inside = {"pte": "products/p/p.pte", "download": {"products/p/p.pte": 9}}
    assert "weights inside the program" in update_summary(inside, inside, {}, {"products/p/p.pte": "x"})[0]
