"""Calls that write an argument in place, back from their functional form (the in-place-calls step).

An operator whose schema writes an argument (`llama::update_cache(Tensor value, Tensor(a!) cache, …)`)
reaches the exported graph functionalized: an `auto_functionalized_v2` call returns the new value
of the written tensor, and when that tensor is a buffer the graph returns it as a buffer mutation,
which the program would copy back whole. This step calls the operator itself again on the tensor
(torch's `unsafe_remove_auto_functionalized_pass`), so the program passes the buffer to the kernel
as its `(a!)` argument, and the buffer mutation names the buffer itself: to-program copies nothing.
Takes and gives the delegated dialect: it runs after partitioning, because the in-place call has no
data edge to the calls that read the buffer after it (only graph order keeps them after it), and
partitioning reorders nodes (an XNNPACK partition moved a layer's `custom_sdpa` before its
`update_cache`: 28 of 32 greedy tokens); the functional form's edges keep that order until here.
torch's pass is imported only for a graph that has such calls: its module imports inductor's
post-grad passes, seconds of import that a build of any other model would pay for nothing.
"""

from __future__ import annotations

from dataclasses import replace

from etbuild.lowering.forms import GraphMethod


def has_functionalized_calls(method: GraphMethod) -> bool:
    """Whether the method's graph calls some operator through `auto_functionalized`."""
    return any(node.op == "call_function" and "auto_functionalized" in str(node.target)
               for node in method.exported.graph.nodes)


def in_place_calls(method: GraphMethod) -> GraphMethod:
    """The method with each functionalized call made the in-place call it stands for."""
    if not has_functionalized_calls(method):
        return method
    from torch.export._remove_auto_functionalized_pass import unsafe_remove_auto_functionalized_pass

    return replace(method, exported=unsafe_remove_auto_functionalized_pass(method.exported))
