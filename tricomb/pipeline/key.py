"""A pipeline's IR as one string, for keys and digests (the disk index): linear in the size of its scalar DAGs.

``repr`` of a dataclass writes a shared subexpression once per path to it, which for a traced ``x = x * 0.5 +
x * 0.25`` repeated n times is about 2**n nodes of text. :func:`ir_key` writes each stage as its fields and each
scalar function's outputs as :func:`~tricomb.scalar.ir.dag_text` (each distinct node once, numbered), so its size
is linear in the DAG and it stays a faithful key: equal IRs give equal keys, different IRs different keys.
"""
from __future__ import annotations

import dataclasses

from ..scalar.ir import Arg, Call, Const, JitCall, dag_text
from .ir import PipelineIR


_EXPRS = (Arg, Const, Call, JitCall)


def _is_exprs(value) -> bool:
    return isinstance(value, tuple) and bool(value) and all(isinstance(v, _EXPRS) for v in value)


def _text(value) -> str:
    """``value`` as key text: a dataclass by its type and the fields its ``repr`` or equality includes, a tuple
    of expressions as one DAG, a tuple element by element, anything else (numbers, dtypes, strings, None) by
    ``repr``, which tells apart ``1``, ``1.0``, ``True`` and ``-0.0``."""
    if isinstance(value, _EXPRS):
        return dag_text((value,))
    if _is_exprs(value):
        return f"[{dag_text(value)}]"
    if isinstance(value, tuple):
        return f"({''.join(_text(v) + ', ' for v in value)})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = [f"{f.name}={_text(getattr(value, f.name))}" for f in dataclasses.fields(value) if f.repr or f.compare]
        return f"{type(value).__name__}({', '.join(parts)})"
    return repr(value)


def ir_key(pipeline: PipelineIR) -> str:
    """``pipeline`` as text that names everything its ``repr`` names (stages, their axes, dtypes, identities,
    scalar functions with their names and locations), in size linear in its scalar DAGs rather than in their
    unfolded trees. A user ``@triton.jit`` function is named by its qualified name and identity: such a key
    tells apart two live functions within one process, and is no name across processes (the disk index keeps
    no pipeline that calls one)."""
    return _text(pipeline)

