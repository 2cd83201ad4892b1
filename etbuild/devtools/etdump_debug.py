"""Intermediate outputs as ETDump debug events (`etbuild profile --etdump … --intermediates`), torch-free.

One extra call of a freshly loaded method, after the timed ones, with every instruction's step
wrapped (etbuild.devtools.instrument) to copy the tensors it wrote into a debug buffer. Each copy is
one `DebugEvent` (chain 0, the instruction's id) whose `Tensor` gives the scalar type, sizes,
strides (in elements) and the offset of its bytes in the buffer, as ExecuTorch's runtime writes
them with a debug buffer; the events go in one `Execute` run of their own, and the buffer in a
file beside the ETDump that ExecuTorch's Inspector reads (`debug_buffer_path`). A delegate call
records the outputs of the whole delegate, as ExecuTorch's runtime does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from etbuild.devtools import etdump_format as ed
from etbuild.devtools import instrument
from etbuild.runtime.program import Method
from etbuild.runtime.tensor import scalar_type

ALIGNMENT = 64  # each tensor's bytes start at a multiple of this in the debug buffer


def intermediate_run(method: Method, inputs: list[Any]) -> tuple[Any, bytes]:
    """Call the method once recording what each instruction wrote: (the run, the debug buffer)."""
    buffer = bytearray()
    events: list[Any] = []
    objects = method.values.objects
    program = instrument.instructions(method)

    def wrap(k: int, step: instrument.Step) -> instrument.Step:
        written = instrument.written(method, program[k])

        def recorded() -> Any:
            result = step()
            for i in written:
                if isinstance(objects[i], np.ndarray) and objects[i].dtype != object:
                    events.append(_debug_event(k, objects[i], buffer))
            return result

        return recorded

    instrument.wrap_steps(method, wrap)
    method(*inputs)
    return ed.RunData("Execute", -1, [], events), bytes(buffer)


def _debug_event(k: int, value: np.ndarray, buffer: bytearray) -> Any:
    data = np.ascontiguousarray(value)
    buffer.extend(b"\0" * (-len(buffer) % ALIGNMENT))
    offset = len(buffer)
    buffer.extend(data.tobytes())
    strides = [s // data.itemsize for s in data.strides] if data.itemsize else []
    tensor = ed.Tensor(scalar_type(data.dtype), list(data.shape), strides, offset)
    return ed.Event(debug_event=ed.DebugEvent(0, k, ed.Value(ed.ValueType.TENSOR, tensor)))
