"""The ETRecord container (`etrecord.bin`), both ways, without torch.

An ETRecord is a zip of named entries (ExecuTorch 1.5.1's `devtools/etrecord`): `ETRECORD_V0`
(empty: the identifier), per method `edge_dialect_exported_program/<method>` (the graph as
exir.serde's JSON) with `…_state_dict`, `…_constants` and `…_example_inputs`, and three JSON
maps keyed by method then instruction id (a decimal string): `debug_handle_map` (the handle,
or for a delegate call the list of handles of the nodes it runs), `delegate_map` (per delegate
call: `{"name": backend id, "delegate_map": {delegate debug id: [handles]}}`) and
`instruction_id_to_num_outs_map`. ExecuTorch's Inspector joins an ETDump's event (instruction
id, delegate debug id) through these maps to graph nodes with that `debug_handle`, and shows
their `nn_module_stack` and `stack_trace`.

ExecuTorch 1.5.1's Inspector reads the maps of `forward` only, and one graph only, so a program of
other methods (or of several) also gets one file per method, `etrecord.<method>.bin`, holding
that method alone under the name `forward`.

Reading checks the zip, the identifier, the sizes of entries before reading them, and the
maps' shapes; anything else is `InvalidETRecord` naming the file and what is wrong.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etbuild.errors import InvalidETRecord
from etbuild.fsutil import write_bytes

IDENTIFIER = "ETRECORD_V0"
EDGE_PROGRAM = "edge_dialect_exported_program"
DEBUG_HANDLE_MAP = "debug_handle_map"
DELEGATE_MAP = "delegate_map"
NUM_OUTS_MAP = "instruction_id_to_num_outs_map"
PROGRAM_PARTS = ("", "_state_dict", "_constants", "_example_inputs")
MAX_ENTRY_BYTES = 256 << 20  # an entry that claims more is refused before it is read
MAX_ENTRIES = 4096
FILE_NAME = "etrecord.bin"
ROOT = "<root>"  # the module path of the model itself
EPOCH = (1980, 1, 1, 0, 0, 0)
INSPECTOR_METHOD = "forward"  # the one method ExecuTorch 1.5.1's Inspector maps events through


def etrecord_path(build_dir: Path) -> Path:
    """`build/<recipe>/etrecord.bin`, the ETRecord of the program built there."""
    return build_dir / FILE_NAME


def method_etrecord_path(build_dir: Path, method: str) -> Path:
    """`build/<recipe>/etrecord.<method>.bin`: one method's ETRecord for ExecuTorch's Inspector."""
    return build_dir / f"etrecord.{method}.bin"


def inspector_methods(methods: Iterable[str]) -> list[str]:
    """The methods that get an ETRecord of their own: every one, unless the program's only method is
    `forward` (its `etrecord.bin` is then what the Inspector reads)."""
    names = sorted(methods)
    return [] if names == [INSPECTOR_METHOD] else names

Handles = int | list[int]


@dataclass(frozen=True)
class MethodRecord:
    """What an ETRecord says about one method: its graph's entries and the per-instruction maps."""

    graph: tuple[bytes, bytes, bytes, bytes]  # program JSON, state dict, constants, example inputs
    handles: dict[int, Handles] = field(default_factory=dict)  # instruction -> debug handle(s)
    delegates: dict[int, dict[str, Any]] = field(default_factory=dict)  # instruction -> delegate map entry
    num_outs: dict[int, int] = field(default_factory=dict)  # instruction -> number of outputs


def to_zip(methods: Mapping[str, MethodRecord]) -> bytes:
    """The ETRecord's bytes, entries in the order ExecuTorch writes them, each dated 1980-01-01 (the
    zip format's first day) so that the same program gives the same bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        def put(name: str, data: bytes | str) -> None:
            z.writestr(zipfile.ZipInfo(name, date_time=EPOCH), data, compress_type=zipfile.ZIP_DEFLATED)

        put(IDENTIFIER, "")
        for name, m in sorted(methods.items()):
            for suffix, data in zip(PROGRAM_PARTS, m.graph):
                put(f"{EDGE_PROGRAM}/{name}{suffix}", data)
        for entry, pick in ((DEBUG_HANDLE_MAP, "handles"), (DELEGATE_MAP, "delegates"), (NUM_OUTS_MAP, "num_outs")):
            put(entry, json.dumps({name: {str(k): v for k, v in sorted(getattr(m, pick).items())}
                                   for name, m in sorted(methods.items())}))
    return buf.getvalue()


def write_etrecord(path: Path, methods: Mapping[str, MethodRecord]) -> None:
    """Write the ETRecord atomically (nothing half-written is left on failure)."""
    write_bytes(path, to_zip(methods))


def write_method_etrecords(build_dir: Path, methods: Mapping[str, MethodRecord]) -> None:
    """Per `inspector_methods`, `etrecord.<method>.bin` holding that method alone under the name
    `forward` (graph and maps), which ExecuTorch's Inspector needs to read it; files of methods the
    program no longer has are removed."""
    wanted = {method_etrecord_path(build_dir, m): m for m in inspector_methods(methods)}
    for stale in set(build_dir.glob("etrecord.*.bin")) - set(wanted):
        stale.unlink()
    for path, method in wanted.items():
        write_etrecord(path, {INSPECTOR_METHOD: methods[method]})


def read_etrecord(path: Path) -> dict[str, MethodRecord]:
    """Every method an ETRecord records; InvalidETRecord naming `path` when it is not a well-formed one."""
    try:
        with zipfile.ZipFile(path) as z:
            return _read(z, str(path))
    except (zipfile.BadZipFile, EOFError) as exc:
        raise InvalidETRecord(f"{path}: not an ETRecord: not a readable zip archive ({exc})") from None
    except OSError as exc:
        raise InvalidETRecord(f"{path}: cannot read the ETRecord ({exc.strerror or exc})") from None


def _read(z: zipfile.ZipFile, source: str) -> dict[str, MethodRecord]:
    infos = {i.filename: i for i in z.infolist()}
    if len(infos) > MAX_ENTRIES:
        raise InvalidETRecord(f"{source}: {len(infos)} entries; an ETRecord of etbuild has at most {MAX_ENTRIES}")
    if IDENTIFIER not in infos:
        raise InvalidETRecord(f"{source}: not an ETRecord: no {IDENTIFIER!r} entry (a foreign zip, or a corrupt file)")
    maps = {e: _json_map(z, infos, e, source) for e in (DEBUG_HANDLE_MAP, DELEGATE_MAP, NUM_OUTS_MAP)}
    prefix = f"{EDGE_PROGRAM}/"
    names = sorted(n[len(prefix):] for n in infos if n.startswith(prefix) and not n.endswith(PROGRAM_PARTS[1:]))
    if not names:
        raise InvalidETRecord(f"{source}: the ETRecord holds no {EDGE_PROGRAM}/<method> graph")
    return {name: MethodRecord(
        tuple(_entry(z, infos, f"{prefix}{name}{s}", source) for s in PROGRAM_PARTS),  # type: ignore[arg-type]
        _by_instruction(maps[DEBUG_HANDLE_MAP], name, source, DEBUG_HANDLE_MAP, _handles),
        _by_instruction(maps[DELEGATE_MAP], name, source, DELEGATE_MAP, _delegate),
        _by_instruction(maps[NUM_OUTS_MAP], name, source, NUM_OUTS_MAP, _count),
    ) for name in names}


def _entry(z: zipfile.ZipFile, infos: Mapping[str, zipfile.ZipInfo], name: str, source: str) -> bytes:
    info = infos.get(name)
    if info is None:
        raise InvalidETRecord(f"{source}: the ETRecord lacks the entry {name!r}")
    if info.file_size > MAX_ENTRY_BYTES:
        raise InvalidETRecord(f"{source}: entry {name!r} claims {info.file_size} bytes; at most {MAX_ENTRY_BYTES}")
    try:
        return z.read(info)
    except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError, RuntimeError) as exc:
        raise InvalidETRecord(f"{source}: entry {name!r} is corrupt ({exc})") from None


def _json_map(z: zipfile.ZipFile, infos: Mapping[str, zipfile.ZipInfo], name: str, source: str) -> dict[str, Any]:
    try:
        data = json.loads(_entry(z, infos, name, source))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidETRecord(f"{source}: entry {name!r} is not JSON ({exc})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise InvalidETRecord(f"{source}: entry {name!r} is not a map of method -> instruction id -> value")
    return data


def _by_instruction(data: Mapping[str, Any], method: str, source: str, entry: str, check: Any) -> dict[int, Any]:
    out = {}
    for key, value in (data.get(method) or {}).items():
        if not (isinstance(key, str) and key.isdigit()) or not check(value):
            raise InvalidETRecord(f"{source}: entry {entry!r}, method {method!r}: instruction {key!r} maps to "
                                  f"{str(value)[:80]!r}, which is not what the entry holds")
        out[int(key)] = value
    return out


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _handles(v: Any) -> bool:
    return _count(v) or (isinstance(v, list) and all(_count(h) for h in v))


def _delegate(v: Any) -> bool:
    return (isinstance(v, dict) and isinstance(v.get("name"), str) and isinstance(v.get("delegate_map"), dict)
            and all(_handles(h) for h in v["delegate_map"].values()))


def graph_nodes(record: MethodRecord, source: str = "<etrecord>") -> dict[int, tuple[str, str]]:
    """Debug handle → (node name, innermost module path; '' when the node records none), from the graph's JSON."""
    try:
        graph = json.loads(record.graph[0])["graph_module"]["graph"]
        out = {}
        for node in graph["nodes"]:
            meta = node.get("metadata") or {}
            if meta.get("debug_handle", "").isdigit():
                out[int(meta["debug_handle"])] = (_node_name(node), innermost_module(meta.get("nn_module_stack", "")))
        return out
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidETRecord(f"{source}: the ETRecord's graph is not exir.serde's JSON ({exc})") from None


def _node_name(node: Mapping[str, Any]) -> str:
    outputs = node.get("outputs") or [{}]
    tensor = outputs[0].get("as_tensor") if isinstance(outputs[0], dict) else None
    return str(tensor.get("name", "")) if isinstance(tensor, dict) else ""


def innermost_module(stack: str) -> str:
    """`encoder.layer.3` from a serialized nn_module_stack (`key,path,type;key,path,type`, innermost last);
    `<root>` for the model itself (as etbuild.lowering.sources says it), '' when there is none."""
    entries = [e for e in _split(stack, ";") if e]
    parts = _split(entries[-1], ",") if entries else []
    return (parts[1] or ROOT) if len(parts) == 3 else ""


def _split(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside brackets (module keys may hold `[...]` or `(...)`)."""
    out, start, depth = [], 0, 0
    for k, ch in enumerate(text):
        depth += (ch in "[(") - (ch in ")]")
        if ch == sep and depth == 0:
            out.append(text[start:k].strip())
            start = k + 1
    out.append(text[start:].strip())
    return out


def instruction_modules(record: MethodRecord, instructions: int, source: str) -> dict[int, list[str]]:
    """Instruction → the module paths of the nodes it computes, in handle order (a delegate call: every
    node of its partition); InvalidETRecord when the record maps an instruction the method lacks."""
    nodes = graph_nodes(record, source)
    out = {}
    for k, handles in record.handles.items():
        if k >= instructions:
            raise InvalidETRecord(f"{source}: the ETRecord maps instruction {k}, but the method has {instructions} "
                                  "instructions: it is the ETRecord of another program")
        paths = [nodes[h][1] for h in ([handles] if isinstance(handles, int) else handles) if h in nodes]
        out[k] = list(dict.fromkeys(p for p in paths if p))
    return out


def delegate_node_modules(record: MethodRecord, source: str = "<etrecord>") -> dict[tuple[int, str], list[str]]:
    """(delegate call's instruction, node id as the ETDump names it) → the module paths of the calls
    that node lowers, from the delegate map (ids matched exactly)."""
    nodes = graph_nodes(record, source)
    out = {}
    for k, entry in record.delegates.items():
        for ident, handles in entry["delegate_map"].items():
            paths = [nodes[h][1] for h in ([handles] if isinstance(handles, int) else handles) if h in nodes]
            out[k, ident] = list(dict.fromkeys(p for p in paths if p))
    return out
