"""Evaluating the IR with torch, stage by stage.

This is the meaning of a pipeline written as torch calls. It runs on meta tensors to learn result dtypes and
shapes (torch decides promotion, weak scalars and reduction dtypes), and on float64 CPU tensors as the oracle
(:mod:`tricomb.testing.reference`).
"""
from __future__ import annotations

from typing import Callable

import torch

from ..errors import StageError, TricombError
from ..scalar.builtins import OPS
from ..scalar.dtypes import typed_identity
from ..scalar.ir import Function, JitCall, fold
from .ir import Map, PipelineIR, Reduce, Scan, ZipWith, new_inputs
from .operators import fold_reduce, fold_scan
from .verify import iteration_axes, operator_identity, operator_spec

OpHook = Callable[[torch.Tensor], torch.Tensor]


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def constant_dtype(value, dtypes: list[torch.dtype], zero_dim: bool) -> torch.dtype:
    """torch's dtype for a Python constant returned by a function of tensors of ``dtypes``."""
    if not dtypes:
        return torch.tensor(value).dtype
    promoted = dtypes[0]
    for d in dtypes[1:]:
        promoted = torch.promote_types(promoted, d)
    return torch.result_type(torch.empty(() if zero_dim else (1,), dtype=promoted, device="meta"), value)


def _as_tensor(value, like: list) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    tensors = [t for t in like if isinstance(t, torch.Tensor)]
    if not tensors:
        return torch.tensor(value)
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    dtype = constant_dtype(value, [t.dtype for t in tensors], len(shape) == 0)
    return torch.full(shape, value, dtype=dtype, device=tensors[0].device)


def _jit_call(expr: JitCall, operands: list) -> torch.Tensor:
    tensors = [t if isinstance(t, torch.Tensor) else torch.tensor(t) for t in operands]
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    dtype = torch.result_type(*tensors) if len(tensors) > 1 else tensors[0].dtype
    if tensors[0].device.type == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    # The meaning of a user @triton.jit function is the function itself: run it alone, elementwise.
    from ..api import Pipeline
    from .ir import ZipWith as Z
    from ..scalar.ir import Arg as A
    fn = Function(len(tensors), (JitCall(expr.fn, tuple(A(i) for i in range(len(tensors)))),), expr.fn.name)
    one = Pipeline(PipelineIR((Z(fn),)))
    return one(*(t.to(dtype).expand(shape) for t in tensors))


def evaluate_function(fn: Function, args: list, after_op: OpHook = _identity) -> list[torch.Tensor]:
    """``fn``'s outputs computed by torch from the tensors ``args``; ``after_op`` is applied to each op's result."""
    def on_call(expr, operands):
        if isinstance(expr, JitCall):
            return after_op(_jit_call(expr, operands))
        if not any(isinstance(o, torch.Tensor) for o in operands):
            operands[0] = torch.tensor(operands[0])
        return after_op(OPS[expr.op].torch(*operands))

    return [_as_tensor(v, args) for v in fold(fn, args, on_call)]


def reduce_tensor(stage: Reduce, x: torch.Tensor) -> torch.Tensor:
    """torch's result for ``stage`` applied to ``x``."""
    dims = iteration_axes(stage, x.dim())
    if stage.mean:
        return torch.mean(x, dim=dims, keepdim=stage.keepdim, dtype=stage.dtype)
    if stage.index:
        return _arg_reduce(stage, x)
    if stage.skip_nan:
        return torch.nansum(x, dim=dims, keepdim=stage.keepdim, dtype=stage.dtype)
    reduce_ref, _ = _references(stage)
    x = _converted(x, stage.dtype)
    if x.dim() == 0:
        return _converted(reduce_ref(x.reshape(1), (0,)).reshape(()), stage.dtype)
    out = reduce_ref(x, dims)
    if stage.keepdim:
        for d in dims:
            out = out.unsqueeze(d)
    return _converted(out, stage.dtype)


def _arg_reduce(stage: Reduce, x: torch.Tensor) -> torch.Tensor:
    """torch.argmax/argmin: over everything (flat positions) or along one axis."""
    fn = torch.argmax if operator_spec(stage.op).name == "maximum" else torch.argmin
    if stage.axis is None:
        out = fn(x)
        return out.reshape((1,) * x.dim()) if stage.keepdim else out
    return fn(x, dim=stage.axis[0], keepdim=stage.keepdim)


def _converted(x: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """``x`` in ``dtype`` (unchanged for None): torch.sum(x, dtype=d) is torch.sum(x.to(d)) with result dtype d,
    and integer sums and products wrap alike in any width, so converting the int64 result back is exact."""
    return x if dtype is None else x.to(dtype)


def scan_tensor(stage: Scan, x: torch.Tensor) -> torch.Tensor:
    """torch's result for ``stage`` applied to ``x``."""
    x = _converted(x, stage.dtype)
    if x.dim() == 0:
        return _scan_along(stage, x.reshape(1), 0).reshape(())
    return _scan_along(stage, x, stage.axis % x.dim())


def _references(stage: Reduce | Scan):
    """torch's reduce and scan for the stage's operator: the builtin's own ops, or a user operator's sequential
    fold, in the dtype the operator gives for two stream values."""
    spec = operator_spec(stage.op)
    if spec is not None and spec.identity is not None:
        return spec.reduce_ref, spec.scan_ref
    fn, identity = stage.op, stage.identity

    def in_dtype(x: torch.Tensor) -> torch.Tensor:
        one = torch.empty((), dtype=x.dtype, device="meta")
        return x.to(evaluate_function(fn, [one, one])[0].dtype)

    return (lambda x, dims: fold_reduce(fn, identity, in_dtype(x), dims),
            lambda x, axis: fold_scan(fn, in_dtype(x), axis))


def _scan_along(stage: Scan, x: torch.Tensor, axis: int) -> torch.Tensor:
    _, scan_ref = _references(stage)
    if stage.reverse:
        x = x.flip(axis)
    out = _converted(scan_ref(x, axis), stage.dtype)
    if stage.exclusive and out.shape[axis] > 0:
        first = torch.full_like(out.narrow(axis, 0, 1), typed_identity(operator_identity(stage), out.dtype))
        out = torch.cat([first, out.narrow(axis, 0, out.shape[axis] - 1)], axis)
    return out.flip(axis) if stage.reverse else out


def evaluate(pipeline: PipelineIR, inputs: list[torch.Tensor], after_op: OpHook = _identity,
             explain_errors: bool = False) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """The pipeline's result computed by torch, stage by stage: a tensor, or a tuple of tensors for a tuple
    stream. With ``explain_errors``, an error torch raises for a stage becomes a :class:`StageError` naming it."""
    fields = evaluate_fields(pipeline, inputs, after_op, explain_errors)
    return fields[0] if len(fields) == 1 else tuple(fields)


def evaluate_fields(pipeline: PipelineIR, inputs: list[torch.Tensor], after_op: OpHook = _identity,
                    explain_errors: bool = False) -> list[torch.Tensor]:
    """:func:`evaluate`, always as a list of the result's fields."""
    pending = list(inputs)
    stream: list[torch.Tensor] = []
    for i, stage in enumerate(pipeline.stages):
        try:
            stream, pending = _evaluate_stage(stage, i, stream, pending, after_op)
        except (RuntimeError, TypeError, ValueError, OverflowError, IndexError) as exc:
            if not explain_errors or isinstance(exc, TricombError):
                raise
            from .printer import stage_text
            what = "a stream of " + ", ".join(f"{tuple(t.shape)} {str(t.dtype)[6:]}" for t in stream) if i else \
                "inputs " + ", ".join(f"{tuple(t.shape)} {str(t.dtype)[6:]}" for t in inputs)
            raise StageError(f"torch rejects stage {i} ({stage_text(stage)}) on {what}: {exc}",
                             stage.location) from None
    return stream


def _evaluate_stage(stage, i: int, stream: list, pending: list, after_op: OpHook):
    """One stage: returns the new stream (its fields) and the inputs not yet consumed."""
    if isinstance(stage, (Map, ZipWith)):
        take = new_inputs((stage,))[0] if i == 0 else max(stage.fn.arity - len(stream), 0)
        return evaluate_function(stage.fn, stream + pending[:take], after_op), pending[take:]
    x = stream[0] if i else pending[0]
    combined = reduce_tensor(stage, x) if isinstance(stage, Reduce) else scan_tensor(stage, x)
    return [after_op(combined)], pending[0 if i else 1:]
