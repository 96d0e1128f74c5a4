"""The pipeline as DSL-style text, for ``str(pipe)``, plans and messages."""
from __future__ import annotations

from ..scalar.ir import Arg, Call, Const, Expr, Function, JitCall
from .ir import Map, PipelineIR, Reduce, Stage, ZipWith
from .shorthands import BY_OPERATOR, INDEX_SHORTHANDS
from .verify import operator_spec

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "lt": "<", "le": "<=", "gt": ">",
          "ge": ">=", "eq": "==", "ne": "!="}
_PARAMS = "xyzuvw"


def _expr(e: Expr, names: list[str]) -> str:
    if isinstance(e, Arg):
        return names[e.index]
    if isinstance(e, Const):
        text = repr(e.value)
        return f"({text})" if text.startswith("-") else text  # (-2.0) ** x is not -(2.0 ** x)
    args = [_expr(a, names) for a in e.args]
    if isinstance(e, JitCall):
        return f"{e.fn.name}({', '.join(args)})"
    if e.op in _INFIX:
        return f"({args[0]} {_INFIX[e.op]} {args[1]})"
    if e.op == "neg":
        return f"(-{args[0]})"
    return f"{e.op}({', '.join(args)})"


def function_text(fn: Function) -> str:
    """A function by its name (a builtin, a def, a @triton.jit function, or its ``env`` key in DSL text);
    an anonymous lambda as ``(x -> exp(x) * 2)``."""
    if fn.name and not fn.name.startswith("<"):
        return fn.name
    out = fn.outputs[0] if len(fn.outputs) == 1 else None
    if isinstance(out, (Call, JitCall)) and out.args == tuple(Arg(i) for i in range(fn.arity)):
        return out.op if isinstance(out, Call) else out.fn.name
    names = [_PARAMS[i] if i < len(_PARAMS) else f"a{i}" for i in range(fn.arity)]
    params = names[0] if fn.arity == 1 else f"({', '.join(names)})"
    body = ", ".join(_expr(o, names) for o in fn.outputs)
    body = f"({body})" if len(fn.outputs) > 1 else body
    return f"({params} -> {body})"


def _args(**kwargs) -> str:
    parts = [f"{k}={str(v)[6:] if k == 'dtype' else repr(v)}" for k, v in kwargs.items() if v is not None]
    return f"({', '.join(parts)})" if parts else ""


def stage_text(stage: Stage) -> str:
    """One stage as DSL text: ``map softplus``, ``sum(axis=-1)``, ``scan add(axis=0)``."""
    if isinstance(stage, Map):
        return f"map {function_text(stage.fn)}"
    if isinstance(stage, ZipWith):
        return f"zip_with {function_text(stage.fn)}"
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


def pipeline_text(pipeline: PipelineIR) -> str:
    """The whole pipeline: stages joined by ``|``."""
    return " | ".join(stage_text(s) for s in pipeline.stages)

