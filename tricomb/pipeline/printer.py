"""The pipeline as DSL-style text, for ``str(pipe)``, plans and messages."""
from __future__ import annotations

import contextlib
import contextvars

from ..scalar.builtins import COORDINATES, OPS
from ..scalar.ir import Arg, Call, Const, Expr, Function, JitCall, children, tree_size, walk
from .ir import Attach, Lag, Map, PipelineIR, Reduce, Stage, ZipWith
from .shorthands import BY_OPERATOR, INDEX_SHORTHANDS
from .verify import operator_spec

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "lt": "<", "le": "<=", "gt": ">",
          "ge": ">=", "eq": "==", "ne": "!="}
_PARAMS = "xyzuvw"
_SCALAR_NAMES: contextvars.ContextVar[dict] = contextvars.ContextVar("tricomb_scalar_names", default={})


def _node_text(e: Expr, operands: list[str], names: list[str]) -> str:
    """One node as DSL text, its operands already written."""
    if isinstance(e, Arg):
        return names[e.index]
    if isinstance(e, Const):
        text = repr(e.value)
        return f"({text})" if text.startswith("-") else text  # (-2.0) ** x is not -(2.0 ** x)
    if isinstance(e, JitCall):
        return f"{e.fn.name}({', '.join(operands)})"
    if e.op in _INFIX:
        return f"({operands[0]} {_INFIX[e.op]} {operands[1]})"
    if e.op == "neg":
        return f"(-{operands[0]})"
    if e.op in COORDINATES:  # an axis, not a value: index(-1)
        return f"{e.op}({e.args[0].value})"
    if OPS[e.op].runtime is not None:  # a runtime scalar: by its name, where the pipeline names it
        return _SCALAR_NAMES.get().get(e.args[0].value, f"scalar{e.args[0].value}")
    return f"{e.op}({', '.join(operands)})"


# An expression whose unfolded tree has more nodes than this is printed with its shared subexpressions named
# (``let t0 = ...; ... in ...``, which the DSL does not parse), so that the text stays linear in its DAG.
_INLINE_LIMIT = 1000


def _shared(outputs: tuple[Expr, ...]) -> set:
    """The calls that occur more than once in ``outputs``' trees: operands of more than one node or more than
    once of one node, or an output that is an operand too."""
    uses: dict[Expr, int] = {}
    for node in walk(*outputs):
        for operand in children(node):
            uses[operand] = uses.get(operand, 0) + 1
    for out in outputs:
        uses[out] = uses.get(out, 0) + 1
    return {node for node, count in uses.items() if count > 1 and isinstance(node, (Call, JitCall))}


def _body(outputs: tuple[Expr, ...], names: list[str]) -> str:
    """The outputs as DSL text: every subexpression inlined when the trees are small; else each shared one
    written once in a ``let`` and used by name."""
    shared = _shared(outputs) if tree_size(outputs, _INLINE_LIMIT) > _INLINE_LIMIT else set()
    texts: dict[Expr, str] = {}
    lets = []
    for node in walk(*outputs):
        texts[node] = _node_text(node, [texts[a] for a in children(node)], names)
        if node in shared:
            name = f"t{len(lets)}"
            lets.append(f"{name} = {texts[node]}")
            texts[node] = name
    body = ", ".join(texts[o] for o in outputs)
    body = f"({body})" if len(outputs) > 1 else body
    return f"let {'; '.join(lets)} in {body}" if lets else body


def function_text(fn: Function) -> str:
    """A function by its name (a builtin, a def, a @triton.jit function, or its ``env`` key in DSL text);
    an anonymous lambda as ``(x -> exp(x) * 2)``, which :func:`tricomb.parse` reads back, or, when its trees
    unfold to more than ``_INLINE_LIMIT`` nodes, with its shared subexpressions named in a ``let``."""
    if fn.name and not fn.name.startswith("<"):
        return fn.name
    out = fn.outputs[0] if len(fn.outputs) == 1 else None
    if isinstance(out, (Call, JitCall)) and out.args == tuple(Arg(i) for i in range(fn.arity)):
        return out.op if isinstance(out, Call) else out.fn.name
    names = [_PARAMS[i] if i < len(_PARAMS) else f"a{i}" for i in range(fn.arity)]
    params = names[0] if fn.arity == 1 else f"({', '.join(names)})"
    return f"({params} -> {_body(fn.outputs, names)})"


def _args(**kwargs) -> str:
    parts = [f"{k}={str(v)[6:] if k == 'dtype' else repr(v)}" for k, v in kwargs.items() if v is not None]
    return f"({', '.join(parts)})" if parts else ""


def stage_text(stage: Stage) -> str:
    """One stage as DSL text: ``map softplus``, ``sum(axis=-1)``, ``scan add(axis=0)``."""
    if isinstance(stage, Map):
        return f"map {function_text(stage.fn)}"
    if isinstance(stage, ZipWith):
        along = stage.constant_along
        text = f"zip_with {function_text(stage.fn)}"
        text = text if not along else text + _args(constant_along=along[0] if len(along) == 1 else along)
        return text + "".join(_lag_text(lag) for lag in stage.lags)
    if isinstance(stage, Attach):
        inner = stage.pipeline
        return f"attach {stage_text(inner.stages[0])}" if len(inner.stages) == 1 else \
            f"attach ({pipeline_text(inner)})"
    spec = operator_spec(stage.op)
    if isinstance(stage, Reduce):
        axis = stage.axis[0] if stage.axis is not None and len(stage.axis) == 1 else stage.axis
        args = _args(axis=axis, keepdim=stage.keepdim or None, dtype=stage.dtype,
                     identity=stage.identity if spec is None or spec.identity is None else None)
        if stage.mean:
            return f"{'nanmean' if stage.skip_nan else 'mean'}{args}"
        if stage.index:
            return f"{INDEX_SHORTHANDS['reduce', spec.name]}{args}"
        if stage.skip_nan:
            return f"nansum{args}"
        short = BY_OPERATOR.get(("reduce", spec.name)) if spec else None
        return f"{short}{args}" if short else f"reduce {function_text(stage.op)}{args}"
    args = _args(axis=stage.axis if stage.axis != -1 else None, reverse=stage.reverse or None,
                 exclusive=stage.exclusive or None, dtype=stage.dtype,
                 identity=stage.identity if spec is None or spec.identity is None else None)
    if stage.index:
        return f"{INDEX_SHORTHANDS['scan', spec.name]}{args}"
    short = BY_OPERATOR.get(("scan", spec.name)) if spec else None
    return f"{short}{args}" if short else f"scan {function_text(stage.op)}{args}"


def _lag_text(lag: Lag) -> str:
    """A lag as IR text (derivative rules build lags; the DSL has no words for them)."""
    return f"; its input {lag.input} read {lag.by} back along axis {lag.axis}, {lag.fill!r} outside"


@contextlib.contextmanager
def scalar_names(names: dict[int, str]):
    """Within the block, runtime scalar ``i`` is written ``names[i]`` (``scalar<i>`` when not there)."""
    token = _SCALAR_NAMES.set(names)
    try:
        yield
    finally:
        _SCALAR_NAMES.reset(token)


def pipeline_text(pipeline: PipelineIR) -> str:
    """The whole pipeline: stages joined by ``|``, then the fields summed over the rows, if any."""
    text = " | ".join(stage_text(s) for s in pipeline.stages)
    if pipeline.column_sums:
        text += f"; fields {', '.join(map(str, pipeline.column_sums))} summed over the rows"
    return text

