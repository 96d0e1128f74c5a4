"""The torch oracle: a pipeline evaluated in float64 on the CPU, with an error scale for every result element.

Each operation's result is rounded to the kernel's compute dtype (float32 for float16, bfloat16 and float32
inputs) and back, so the oracle overflows and underflows where the kernel does, while keeping float64's
accuracy inside each operation. Alongside the value it tracks ``scale``: the largest magnitude any
intermediate reached on the way to each element (for a sum, the sum of magnitudes). Rounding errors are
proportional to that scale, so comparisons stay tight without failing on cancellation.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..lower.bind import bind
from ..lower.fuse import plan
from ..pipeline.evaluate import evaluate, evaluate_function, reduce_tensor, scan_tensor
from ..pipeline.ir import Map, PipelineIR, Reduce, Scan, ZipWith
from ..pipeline.verify import operator_spec
from ..scalar.trace import BUILTINS, to_function


@dataclass(frozen=True)
class Reference:
    """The oracle's answer: float64 ``value``, per-element error ``scale``, and torch's result dtype."""

    value: torch.Tensor
    scale: torch.Tensor
    dtype: torch.dtype
    length: int  # the longest chain of elements combined into one result (1 without reduce/scan)


def _ir(pipe) -> PipelineIR:
    return pipe.ir if hasattr(pipe, "ir") else pipe


def _magnitude(t: torch.Tensor) -> torch.Tensor:
    """|t| in float64, with NaN and infinities as 0 (they are compared exactly, not by tolerance)."""
    return t.to(torch.float64).abs().nan_to_num(0.0, 0.0, 0.0)


def _combine_scale(stage, value: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The error scale after a reduce/scan: sums add magnitudes; max/min pass the chosen element's scale on;
    products carry a relative error, so their scale is the result's own magnitude."""
    name = operator_spec(stage.op).name
    stage = dataclasses.replace(stage, dtype=None)  # scales stay float64 whatever the result's dtype
    if name == "mul":
        return _magnitude(value)
    if name != "add":
        op = to_function(BUILTINS["maximum"], role="scale")
        stage = Reduce(op, stage.axis, stage.keepdim) if isinstance(stage, Reduce) else Scan(op, stage.axis)
    return reduce_tensor(stage, scale) if isinstance(stage, Reduce) else scan_tensor(stage, scale)


def _length(stage, before: torch.Tensor, after: torch.Tensor) -> int:
    """How many elements were combined into one result."""
    if isinstance(stage, Scan):
        return before.shape[stage.axis] if before.dim() else 1
    return before.numel() // after.numel() if after.numel() else before.numel()


def reference(pipe, *inputs: torch.Tensor) -> Reference:
    """Evaluate ``pipe`` (a Pipeline or PipelineIR) on ``inputs`` as the oracle does."""
    ir = _ir(pipe)
    binding, _ = bind(ir, inputs)
    kernel_plan = plan(ir, binding)
    compute = kernel_plan.compute_dtype
    meta = evaluate(ir, [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in inputs])

    def rounded(t: torch.Tensor) -> torch.Tensor:
        return t.to(compute).to(torch.float64) if t.is_floating_point() else t

    # floats are evaluated in float64; integers and bools in their own dtype, exactly as torch computes them
    pending = [t.detach().cpu().to(torch.float64) if t.is_floating_point() else t.detach().cpu() for t in inputs]
    value = scale = None
    length = 1
    for i, stage in enumerate(ir.stages):
        if isinstance(stage, (Map, ZipWith)):
            if i == 0:
                take = 1 if isinstance(stage, Map) else stage.fn.arity
                args, pending = pending[:take], pending[take:]
                scales = [_magnitude(a) for a in args]
            else:
                take = stage.fn.arity - 1
                args, pending = [value] + pending[:take], pending[take:]
                scales = [scale] + [_magnitude(a) for a in args[1:]]
            steps: list[torch.Tensor] = []

            def record(t: torch.Tensor) -> torch.Tensor:
                t = rounded(t)
                steps.append(_magnitude(t))
                return t

            value = evaluate_function(stage.fn, args, record)[0]
            value = value.to(torch.float64) if value.is_floating_point() else value
            shape = value.shape
            scale = torch.stack([s.expand(shape) for s in scales + steps + [_magnitude(value)]]).amax(0)
            continue
        if i == 0:
            value, pending = pending[0], pending[1:]
            scale = _magnitude(value)
        before = value
        value = rounded(reduce_tensor(stage, value) if isinstance(stage, Reduce) else scan_tensor(stage, value))
        scale = torch.maximum(_magnitude(_combine_scale(stage, value, scale)), _magnitude(value))
        length = max(1, _length(stage, before, value))
    return Reference(value, scale, meta.dtype, length)
