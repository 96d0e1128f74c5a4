"""The torch oracle: a pipeline evaluated in float64 on the CPU, with an error scale for every result element.

Each operation's result is rounded to the kernel's compute dtype (float32 for float16, bfloat16 and float32
inputs) and back, so the oracle overflows and underflows where the kernel does, while keeping float64's
accuracy inside each operation. Alongside the value it tracks ``scale``: the largest magnitude any
intermediate reached on the way to each element (for a sum, the sum of magnitudes). Rounding errors are
proportional to that scale, so comparisons stay tight without failing on cancellation.

It also marks the elements whose value depends on the order of combination beyond rounding: those where some
grouping of a reduce's or scan's elements takes a partial result out of the compute dtype's normal range
(``1e-30 * 1e-30 * inf`` is NaN when the first product underflows, infinity when it does not). torch has no
single answer there either: its float32 ``cumprod`` accumulates in float64 on the CPU and in float32 on CUDA.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import torch

from ..pipeline.evaluate import (attach_fields, coordinate, evaluate_fields, evaluate_function, reduce_fields, reduce_tensor, with_lags,
                                 scan_fields, scan_tensor)
from ..pipeline.evaluate import Weak, runtime_value, runtime_values, weak_call, weak_number
from ..pipeline.ir import Attach, Map, PipelineIR, Reduce, Scan, ZipWith, new_inputs
from ..pipeline.scalars import plain_scalar, with_runtime_scalars
from ..pipeline.verify import iteration_axes, operator_spec
from ..scalar.builtins import INDEX, OPS
from ..scalar.dtypes import kernel_compute_dtype
from ..scalar.ir import Arg, Call, Const, Function, fold
from ..scalar.trace import BUILTINS, to_function


@dataclass(frozen=True)
class Reference:
    """The oracle's answer: float64 ``value``, per-element error ``scale``, and torch's result dtype."""

    value: torch.Tensor
    scale: torch.Tensor
    dtype: torch.dtype
    length: int  # the longest chain of elements combined into one result (1 without reduce/scan)
    compute: torch.dtype = torch.float64  # the least precise dtype the kernel computes any stage in
    order_dependent: torch.Tensor | None = None  # bool, True where the combination order decides the value


def _ir(pipe) -> PipelineIR:
    return pipe.ir if hasattr(pipe, "ir") else pipe


def _magnitude(t: torch.Tensor) -> torch.Tensor:
    """|t| in float64, with NaN and infinities as 0 (they are compared exactly, not by tolerance)."""
    return t.to(torch.float64).abs().nan_to_num(0.0, 0.0, 0.0)


def _fold_as_sum(stage, t: torch.Tensor) -> torch.Tensor:
    """``t`` summed in float64 over the elements ``stage`` combines into each result (same axes, keepdim,
    direction and exclusivity)."""
    add = to_function(BUILTINS["add"], role="oracle")
    stage = dataclasses.replace(stage, op=add, dtype=None, identity=None, **(
        {"index": False, "mean": False, "skip_nan": False} if isinstance(stage, Reduce) else {}))
    t = t.to(torch.float64)
    return reduce_tensor(stage, t) if isinstance(stage, Reduce) else scan_tensor(stage, t)


def _combine_scale(stage, value: torch.Tensor, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The error scale after a reduce/scan of ``x`` (whose elements have error scales ``scale``) giving ``value``:
    sums add magnitudes; max/min pass the chosen element's scale on; products add their factors' relative errors
    (a factor after a cancellation, 2 * x - 1 say, carries a large one), so their scale is the result's magnitude
    times the summed relative scales (at least 1); a user operator's scale is the sum of magnitudes (as if it
    were a sum)."""
    spec = operator_spec(stage.op)
    builtin = spec is not None and spec.identity is not None
    if builtin and spec.name == "mul":
        size = _magnitude(x)
        relative = torch.where(size > 0, scale / torch.where(size > 0, size, 1.0), torch.zeros_like(size))
        return _magnitude(value) * _fold_as_sum(stage, relative).clamp_min(1.0)
    if builtin and spec.name == "add":
        stage = dataclasses.replace(stage, dtype=None)  # sums (and means) of the magnitudes, in float64
    else:
        op = to_function(BUILTINS["maximum" if builtin else "add"], role="scale")
        stage = dataclasses.replace(stage, op=op, dtype=None, identity=None, **(
            {"index": False, "mean": False, "skip_nan": False} if isinstance(stage, Reduce) else {"exclusive": False}))
    if isinstance(stage, Reduce) and scale.numel() == 0:
        return torch.zeros_like(value, dtype=torch.float64)  # nothing combined: no error (amax of nothing raises)
    return reduce_tensor(stage, scale) if isinstance(stage, Reduce) else scan_tensor(stage, scale)


def _order_dependent(stage, value: torch.Tensor, summed_scale: torch.Tensor, compute: torch.dtype) -> torch.Tensor:
    """Where some grouping of the combined elements leaves ``compute``'s normal range on the way: a sum's partial
    sums are bounded by its sum of magnitudes (``summed_scale``); a product's partial products lie between the
    product of its finite nonzero factors below 1 in magnitude and that of those above 1. max/min and the logical
    operators choose an element and never leave the range."""
    spec = operator_spec(stage.op)
    builtin = spec is not None and spec.identity is not None
    floating = value.is_floating_point() or (stage.dtype is not None and stage.dtype.is_floating_point)
    if not floating or (builtin and spec.name not in ("add", "mul")):
        return torch.zeros(summed_scale.shape, dtype=torch.bool)
    info = torch.finfo(compute)
    if not builtin or spec.name == "add":
        return summed_scale > info.max
    magnitude = value.to(torch.float64).abs()
    log = torch.where(torch.isfinite(magnitude) & (magnitude > 0), magnitude.log(), torch.zeros_like(magnitude))
    return (_fold_as_sum(stage, log.clamp(min=0)) > math.log(info.max)) | \
        (_fold_as_sum(stage, log.clamp(max=0)) < math.log(info.tiny))


def _cancelled(stage, value: torch.Tensor, scale: torch.Tensor, x: torch.Tensor, compute: torch.dtype) -> torch.Tensor:
    """Where a float sum (or mean) cancels to within its rounding error of zero: its sign, and so what a later
    log, sqrt or division makes of it (NaN, -inf or a number), is decided by the order of combination, which the
    kernel's tiles choose (``map gelu | mean | map log`` of values summing to about 0)."""
    spec = operator_spec(stage.op)
    if not (value.is_floating_point() and spec is not None and spec.name == "add"):
        return torch.zeros((), dtype=torch.bool)
    length = _length(stage, x, value) if value.numel() else 1
    bound = torch.finfo(compute).eps * (16.0 + 4.0 * math.sqrt(length)) * scale
    return value.abs() < bound  # (a sum of zeros, of no error, is exact)


def _meets_non_finite(stage, xs: list[torch.Tensor]) -> torch.Tensor:
    """Where a user operator combines an infinity or NaN into the result. Its associativity is checked on finite
    numbers only: with an infinity, one grouping can multiply it by zero and another not (a linear recurrence
    whose decays hold 0 and inf gives NaN or inf by grouping), so there the grouping decides the value. Builtin
    operators are associative on infinities too."""
    spec = operator_spec(stage.op)
    if spec is not None and spec.identity is not None:
        return torch.zeros((), dtype=torch.bool)
    flags = [(~torch.isfinite(x)).to(torch.float64) for x in xs if x.is_floating_point()]
    if not flags:
        return torch.zeros((), dtype=torch.bool)
    return functools.reduce(torch.logical_or, [_fold_as_sum(stage, f) > 0 for f in flags])


def _spread(masks: list[torch.Tensor], shape) -> torch.Tensor:
    """An elementwise result of ``shape`` is order dependent where any stream field it broadcasts from is."""
    out = torch.zeros(shape, dtype=torch.bool)
    for m in masks:
        if torch.broadcast_shapes(m.shape, shape) == tuple(shape):
            out = out | m
    return out


def _length(stage, before: torch.Tensor, after: torch.Tensor) -> int:
    """How many elements were combined into one result."""
    if isinstance(stage, Scan):
        return before.shape[stage.axis] if before.dim() else 1
    return before.numel() // after.numel() if after.numel() else before.numel()


def reference(pipe, *inputs: torch.Tensor) -> Reference | tuple[Reference, ...]:
    """Evaluate ``pipe`` (a Pipeline or PipelineIR) on ``inputs`` as the oracle does: a :class:`Reference`, or
    one per field for a pipeline whose result is a tuple. A number among ``inputs`` is a runtime scalar, as in a
    call."""
    ir = _ir(pipe)
    if not all(isinstance(t, torch.Tensor) for t in inputs):
        kinds = tuple(None if isinstance(t, torch.Tensor) else type(plain_scalar(t, "input")) for t in inputs)
        values = tuple(plain_scalar(t, "input") for t in inputs if not isinstance(t, torch.Tensor))
        with runtime_values(values):
            return reference(with_runtime_scalars(ir, kinds), *(t for t in inputs if isinstance(t, torch.Tensor)))
    metas = [torch.empty_like(t, device="meta") for t in inputs]  # torch's dtype of every value, alongside
    fields = evaluate_fields(ir, metas, explain_errors=True)
    compute = kernel_compute_dtype(t.dtype for t in inputs)

    def rounded(t: torch.Tensor) -> torch.Tensor:
        return t.to(compute).to(torch.float64) if t.is_floating_point() else t

    # floats are evaluated in float64; integers and bools in their own dtype, exactly as torch computes them
    pending = [t.detach().cpu().to(torch.float64) if t.is_floating_point() else t.detach().cpu() for t in inputs]
    state = _Stream(rounded, compute, {t.dtype for t in inputs})
    state.run(ir.stages, pending, metas)
    values, scales, loose, seen, length = state.values, state.scales, state.loose, state.seen, state.length
    least = torch.float32 if seen & {torch.float16, torch.bfloat16, torch.float32} else compute
    loose = loose or [torch.zeros(v.shape, dtype=torch.bool) for v in values]
    refs = tuple(Reference(v, s, f.dtype, length, least, _spread(loose, v.shape))
                 for v, s, f in zip(values, scales, fields))
    return refs[0] if len(refs) == 1 else refs


class _Stream:
    """The oracle's stream as stages run: per field its float64 (or exact) ``values``, error ``scales``, torch's
    meta tensor (``kinds``) and where the order of combination decides it (``loose``); the dtypes ``seen`` so
    far and the longest chain of elements combined (``length``)."""

    def __init__(self, rounded, compute: torch.dtype, seen: set):
        self.rounded, self.compute, self.seen = rounded, compute, seen
        self.values: list[torch.Tensor] = []
        self.scales: list[torch.Tensor] = []
        self.kinds: list[torch.Tensor] = []
        self.loose: list[torch.Tensor] = []
        self.length = 1

    def run(self, stages, pending: list, metas: list, continued: bool = False) -> None:
        """Run ``stages`` on the stream, taking new inputs from ``pending`` (and their ``metas``); ``continued``:
        the stages continue a stream (an attached pipeline's), so none takes inputs as a first stage does."""
        for i, (stage, take) in enumerate(zip(stages, new_inputs(stages))):
            first = i == 0 and not continued
            take = 0 if continued else take
            new, pending = pending[:take], pending[take:]
            new_metas, metas = metas[:take], metas[take:]
            if isinstance(stage, (Map, ZipWith)):
                self._apply(stage, new, new_metas)
                continue
            if first:
                self.values, self.scales, self.kinds = new[:1], [_magnitude(new[0])], new_metas[:1]
                self.loose = [torch.zeros(new[0].shape, dtype=torch.bool)]
            if isinstance(stage, Attach):
                self._attach(stage)
            else:
                self._combine(stage)

    def _apply(self, stage, new: list, new_metas: list) -> None:
        args = with_lags(stage, self.kinds + new_metas, len(self.kinds))
        values = with_lags(stage, self.values + new, len(self.values))
        scales = self.scales + [_magnitude(a) for a in values[len(self.values):]]
        self.values, self.scales = _apply(stage, values, scales, self.rounded, [m.dtype for m in args])
        self.loose = [_spread(self.loose, v.shape) for v in self.values]
        self.kinds = evaluate_function(stage.fn, args)
        self.seen |= {k.dtype for k in self.kinds}

    def _combine(self, stage) -> None:
        xs = self.values
        self.values, self.scales, self.loose = _combine(stage, xs, self.scales, self.loose, self.compute,
                                                        self.rounded)
        fold = reduce_fields if isinstance(stage, Reduce) else scan_fields
        self.kinds = fold(stage, self.kinds)
        self.seen |= {k.dtype for k in self.kinds}
        self.length = max(self.length, _length(stage, xs[0], self.values[0]))

    def _attach(self, stage: Attach) -> None:
        """The stream's fields broadcast together, followed by the attached pipeline's fields, each expanded
        along the reduced axes (as :func:`~tricomb.pipeline.evaluate.attach_fields`), with its scale."""
        shape = torch.broadcast_shapes(*(v.shape for v in self.values))
        self.values, self.scales, self.loose = ([t.expand(shape) for t in ts]
                                                for ts in (self.values, self.scales, self.loose))
        self.kinds = [k.expand(shape) for k in self.kinds]
        kept, kinds = (self.values, self.scales, self.loose), self.kinds
        if math.prod(shape) == 0:  # attached to nothing (attach_fields): empty fields, no reduction taken
            fields = attach_fields(stage, kinds)[len(kinds):]
            empty = [torch.empty(shape, dtype=torch.float64 if f.is_floating_point() else f.dtype) for f in fields]
            self.values = kept[0] + empty
            self.scales = kept[1] + [torch.zeros(shape, dtype=torch.float64) for _ in fields]
            self.loose = kept[2] + [torch.zeros(shape, dtype=torch.bool) for _ in fields]
            self.kinds = kinds + fields
            return
        self.run(stage.pipeline.stages, [], [], continued=True)
        axes = iteration_axes(stage.reduce, len(shape))
        grown = []
        for ts in (self.values, self.scales, self.loose):
            if not stage.reduce.keepdim:
                for d in axes:
                    ts = [t.unsqueeze(d) if t.dim() < len(shape) else t for t in ts]
            grown.append([t.expand(shape) for t in ts])
        self.values, self.scales, self.loose = (a + b for a, b in zip(kept, grown))
        self.kinds = kinds + attach_fields(stage, kinds)[len(kinds):]


def _combine(stage, xs: list, scales: list, loose: list, compute: torch.dtype, rounded):
    """A reduce or scan on the oracle's fields ``xs``: the combined values, their error scales and where the
    order of combination decides them. An operator on k-tuples mixes its fields (a linear recurrence multiplies
    values by decays), so each field's scale is the largest sum of magnitudes over all fields."""
    fold = reduce_fields if isinstance(stage, Reduce) else scan_fields
    combined = [rounded(c) for c in fold(stage, xs)]
    spread = functools.reduce(torch.logical_or, [_fold_as_sum(stage, m) > 0 for m in loose])
    if len(xs) == 1:
        summed = _fold_as_sum(stage, scales[0])
        scale = torch.maximum(_magnitude(_combine_scale(stage, combined[0], xs[0], scales[0])),
                              _magnitude(combined[0]))
        loose = spread | _order_dependent(stage, xs[0], summed, compute) | _meets_non_finite(stage, xs) | \
            _cancelled(stage, combined[0], scale, xs[0], compute)
        # (cummax/cummin add a field: the positions, exact)
        return combined, [scale] + [torch.zeros(scale.shape)] * (len(combined) - 1), [loose] * len(combined)
    bound = functools.reduce(torch.maximum, [_fold_as_sum(stage, s) for s in scales])
    order_dependent = spread | (bound > torch.finfo(compute).max) | _meets_non_finite(stage, xs)
    return combined, [torch.maximum(bound, _magnitude(c)) for c in combined], [order_dependent] * len(combined)


_HALF = (torch.float16, torch.bfloat16)


def _evaluate_rounding_operands(fn, args: list[torch.Tensor], dtypes: list[torch.dtype], after_op) -> list:
    """``fn`` on the oracle's float64 values, as :func:`evaluate_function` does, except that an operand meeting an
    op whose torch dtype is float16 or bfloat16 is first rounded to that dtype when its own torch dtype differs:
    torch converts operands to the common dtype (int32 2049 meeting float16 becomes 2048) before computing.
    ``dtypes`` are the torch dtypes of ``args``; each intermediate's is found on meta tensors."""
    def meta(o):
        return torch.empty(o[0].shape, dtype=o[1], device="meta") if isinstance(o, tuple) else o

    def on_call(expr, operands):
        if isinstance(expr, Call) and expr.op == INDEX.name:
            return coordinate(operands[0], args), torch.int64
        if isinstance(expr, Call) and OPS[expr.op].runtime is not None:
            return runtime_value(OPS[expr.op].runtime, operands[0])
        if any(isinstance(o, Weak) for o in operands):
            if isinstance(expr, Call) and not any(isinstance(o, tuple) for o in operands):
                return weak_call(expr.op, operands)
            operands = [weak_number(o) for o in operands]
        metas = [meta(o) for o in operands]
        if not any(isinstance(m, torch.Tensor) for m in metas):
            metas[0] = torch.tensor(metas[0])
        tensors = [m if isinstance(m, torch.Tensor) else torch.tensor(m) for m in metas]
        target = OPS[expr.op].torch(*metas).dtype if isinstance(expr, Call) else \
            torch.result_type(*tensors) if len(tensors) > 1 else tensors[0].dtype
        if isinstance(expr, Call) and expr.op in ("lt", "le", "gt", "ge", "eq", "ne"):
            target = torch.result_type(*metas) if isinstance(metas[0], torch.Tensor) else \
                torch.result_type(metas[1], metas[0])
        values = [_rounded_to(o, target) if isinstance(o, tuple) else o for o in operands]
        if isinstance(expr, Call) and expr.op == "where":
            values[0] = operands[0][0] if isinstance(operands[0], tuple) else operands[0]
        result = evaluate_function(Function(len(values), (_call_of(expr, len(values)),)), values, after_op)[0]
        return result, OPS[expr.op].torch(*metas).dtype if isinstance(expr, Call) else target

    return [o[0] if isinstance(o, tuple) else _as_output(weak_number(o), args)
            for o in fold(fn, list(zip(args, dtypes)), on_call)]


def _rounded_to(operand: tuple, target: torch.dtype) -> torch.Tensor:
    value, dtype = operand
    if target in _HALF and dtype != target:
        return value.to(target).to(torch.float64)
    return value


def _call_of(expr, arity: int):
    """``expr``'s operation applied to arguments 0..arity-1."""
    return dataclasses.replace(expr, args=tuple(Arg(i) for i in range(arity)))


def _as_output(o, args: list[torch.Tensor]) -> torch.Tensor:
    return evaluate_function(Function(len(args), (Const(o),)), args)[0]  # a constant: broadcast as torch does


def _apply(stage, args: list[torch.Tensor], scales: list[torch.Tensor], rounded, dtypes: list[torch.dtype]):
    """A map or zip_with on the oracle's values: each op rounded to the compute dtype; each field's scale is the
    largest magnitude among the arguments, the intermediates and the field itself."""
    steps: list[torch.Tensor] = []

    def record(t: torch.Tensor) -> torch.Tensor:
        t = rounded(t)
        steps.append(_magnitude(t))
        return t

    outputs = _evaluate_rounding_operands(stage.fn, args, dtypes, record)
    outputs = [v.to(torch.float64) if v.is_floating_point() else v for v in outputs]
    out_scales = []
    for v in outputs:
        shape = v.shape
        parts = [s for s in scales + steps if torch.broadcast_shapes(s.shape, shape) == shape]
        out_scales.append(torch.stack([p.expand(shape) for p in parts + [_magnitude(v)]]).amax(0))
    return outputs, out_scales
