"""Build events: text lines, JSON lines for CI, a live table on a terminal."""

from __future__ import annotations

import io
import json

from etbuild.build.progress import JsonSink, LiveSink, TextSink, event, make_sink
from etbuild.cli import main
from tests.etbuild.build.test_driver import RECIPE, STAGES


def test_text_lines_serial_and_parallel():
    serial, parallel = io.StringIO(), io.StringIO()
    for sink in (TextSink(serial), TextSink(parallel, parallel=True)):
        sink.emit(event("start", "plan:mlp"))
        sink.emit(event("end", "plan:mlp", seconds=0.5, cache="hit"))
        sink.emit(event("note", message="something to know"))
    assert serial.getvalue() == f"  {'plan:mlp':<32} ...    0.50 s (cached)\nnote: something to know\n"
    assert parallel.getvalue() == serial.getvalue()


def test_the_live_table_redraws_one_row_per_product():
    out = io.StringIO()
    sink = LiveSink(out)
    sink.emit(event("start", "export:mlp"))
    sink.emit(event("end", "export:mlp", seconds=1.25, cache="miss"))
    sink.emit(event("start", "export:kws"))
    sink.emit(event("fail", "export:kws", message="bad", exit_code=2))
    sink.close()
    text = out.getvalue()
    assert text.count("\x1b[2K") == 1 + 1 + 2 + 2  # each draw rewrites every row
    assert "\x1b[2F" in text  # back up over two rows before redrawing
    last = text.rsplit("\x1b[2F", 1)[1]
    assert "  mlp  export 1.2s\n" in last and "  kws  export FAILED\n" in last
    assert text.endswith("\nerror: export:kws: bad\n\n")


def test_make_sink_picks_json_then_terminal_then_text():
    assert isinstance(make_sink(io.StringIO(), json_lines=True), JsonSink)
    assert isinstance(make_sink(io.StringIO(), live=True), LiveSink)
    assert isinstance(make_sink(io.StringIO()), TextSink)  # not a terminal


def test_build_json_streams_one_event_per_line(tmp_path, capsys):
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(RECIPE)
    assert main(["build", str(recipe), "--build-dir", str(tmp_path / "b"), "--json",
                 "--cache", str(tmp_path / "cache")]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["task"] for e in events if e["event"] == "end"] == STAGES
    assert {e["cache"] for e in events if e["event"] == "end"} == {"miss"}
    assert all(e["time"] >= 0 for e in events)
    assert events[0] == {**events[0], "event": "start", "task": "export:tiny", "stage": "export", "product": "tiny"}
