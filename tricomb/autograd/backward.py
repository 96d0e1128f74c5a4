"""Backward pipelines: the gradient of a pipeline's inputs, computed by pipelines tricomb derives and fuses.

One class per kind of pipeline, selected by the kind of its fold (:data:`RULES`), as the forward plans are:

* :class:`Elementwise` (maps and zip_withs): one kernel, the pullback of the composed function;
* :class:`ReduceRule` (maps, a reduce, maps): the stages after the reduce pulled back first, then one kernel
  that recomputes the stream before the reduce, spreads the reduce's cotangent over it and pulls it back
  through the stages before;
* :class:`ScanRule` (maps, a cumsum, maps): as a reduce, with the reverse cumsum of the cotangent between;
* :class:`~.adjoint.AdjointReduce` and :class:`~.adjoint.AdjointScan`: a reduce or scan by any other operator
  (prod, cumprod, cummax, logcumsumexp, tuple operators), by the reverse scan of its adjoint (``adjoint.py``);
* :class:`~.composed.Composed`: a pipeline that folds more than once (an attach, a second reduce or scan), cut
  into pipelines of one fold each, their backwards chained (``composed.py``).

What is saved for backward, by stage kind: maps and zip_withs save nothing of their own (their values are
recomputed inside the backward kernels: a map's output is cheaper to recompute than to store and read back);
a reduce or scan saves its result when it is the pipeline's (else the stages through the fold recompute it,
one kernel, and only where the pullback reads it); the adjoint rules recompute the exclusive prefix (and a
reduce's suffix) from the inputs. The inputs are saved in every case.

An input that broadcasts gets its gradient summed over the axes it broadcasts along, in the same kernel: a
zip_with then a reduce over those axes (torch's ``sum_to_size``). Every gradient has its input's dtype.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from ..pipeline.ir import Map, PipelineIR, Reduce, Scan, ZipWith
from ..pipeline.verify import iteration_axes, operator_spec
from ..scalar.builtins import convert_op
from ..scalar.derivatives import differentiable, pullback
from ..scalar.ir import Arg, Call, Expr, Function, substitute
from ..scalar.trace import BUILTINS, Traced
from .adjoint import AdjointReduce, AdjointScan
from .composed import Composed
from .gather import ADD, Run, Tensors, after_fold, counted_once, gather, with_cotangents, zero_if_none
from .parts import Parts, compose, parts
class NoGradient:
    """A reduce whose result carries no gradient (argmax and argmin's positions, any and all's bools): torch
    gives such results no grad_fn, and autograd never asks for their backward."""

    scans = False  # whether its backward kernels scan (a traced CUDA backward records none that do)

    @staticmethod
    def applies(p: Parts) -> bool:
        spec = operator_spec(p.fold.op) if isinstance(p.fold, Reduce) else None
        return isinstance(p.fold, Reduce) and (p.fold.index or (spec is not None and spec.name in
                                                                ("logical_and", "logical_or")))

    @staticmethod
    def check(p: Parts) -> None:
        pass

    @staticmethod
    def backward(p: Parts, inputs: tuple, result: tuple, grads: Tensors, wanted: tuple[int, ...], run: Run):
        return [None] * len(wanted)


class Elementwise:
    """Maps and zip_withs: one kernel (one per broadcast input) of the composed function's pullback."""

    scans = False

    @staticmethod
    def applies(p: Parts) -> bool:
        return p.fold is None

    @staticmethod
    def check(p: Parts) -> None:
        pass

    @staticmethod
    def backward(p: Parts, inputs: tuple, result: tuple, grads: Tensors, wanted: tuple[int, ...], run: Run):
        fn = compose_all(p)
        pulled, cotangents = with_cotangents(pullback(fn, wanted), fn.arity, grads)
        shape = torch.broadcast_shapes(*(t.shape for t in (*inputs, *cotangents)))
        return gather(counted_once(pulled, fn.arity, cotangents, shape), inputs, cotangents, wanted, run)


class ReduceRule:
    """A reduce by sum, mean, max, min (torch's amax rule: ties share the cotangent evenly) or logaddexp
    (torch's logsumexp rule: each element's share is ``exp(s - r)``), between maps."""

    scans = False

    SPREAD = ("add", "maximum", "minimum", "logaddexp")

    @staticmethod
    def applies(p: Parts) -> bool:
        spec = operator_spec(p.fold.op) if isinstance(p.fold, Reduce) else None
        return spec is not None and spec.name in ReduceRule.SPREAD

    @staticmethod
    def check(p: Parts) -> None:
        pass

    @staticmethod
    def backward(p: Parts, inputs: tuple, result: tuple, grads: Tensors, wanted: tuple[int, ...], run: Run):
        early, late = inputs[:p.early], inputs[p.early:]
        folded, cots, late_grads, _ = after_fold(p, early, late, result, grads, wanted, run, values=True)
        reduced, dreduced = folded[0], zero_if_none(cots[0], folded[0])
        shape = torch.broadcast_shapes(*(t.shape for t in early))
        axes = iteration_axes(p.fold, len(shape))
        kept = _kept(reduced, p.fold, axes)
        spread = _kept(dreduced, p.fold, axes)
        name = operator_spec(p.fold.op).name
        if p.fold.mean and not p.fold.skip_nan:
            spread = spread / math.prod(shape[d] for d in axes)
        before = p.before_function()
        n = p.early
        stream = substitute(before, [Arg(i) for i in range(n)])[0]
        # the stream's cotangent, over arguments n (the spread cotangent), n + 1 (the result or a count), n + 2
        g, r = Traced(Arg(n)), Traced(Arg(n + 1))
        nan = Traced(stream) != Traced(stream)
        if name in ("maximum", "minimum"):
            ties = _row_count(before, n, axes, lambda x: Call("eq", (_as(x, kept.dtype), Arg(n))), 1)
            extras = [spread, kept, run(ties, (*early, kept))[0]]
            share = (g / Traced(Arg(n + 2))) * (Traced(_as(stream, kept.dtype)) == r)
        elif name == "logaddexp":
            extras, share = [spread, kept], g * BUILTINS["exp"](Traced(stream) - r)
        elif p.fold.skip_nan and p.fold.mean:  # torch's nanmean: nansum's gradient over the count of numbers
            valid = _row_count(before, n, axes, lambda x: Call("eq", (x, x)), 0)  # (0 in a row of NaN: NaN, as torch)
            extras, share = [spread, run(valid, early)[0]], BUILTINS["where"](nan, 0.0, g) / r
        elif p.fold.skip_nan:  # torch's nansum: no gradient to a NaN element
            extras, share = [spread], BUILTINS["where"](nan, 0.0, g)
        else:
            extras, share = [spread], g
        early_wanted = tuple(i for i in wanted if i < n)
        pulled = pullback(before, early_wanted)
        outs = substitute(pulled, [Arg(i) for i in range(n)] + [share.expr])
        fn = Function(n + len(extras), tuple(outs), pulled.name)
        return gather(fn, early, extras, early_wanted, run) + late_grads


class ScanRule:
    """A cumsum (forward or reverse, inclusive or exclusive) between maps: the cotangent's cumsum the other way
    round (``exclusive`` kept), then the stages before pulled back."""

    scans = True

    @staticmethod
    def applies(p: Parts) -> bool:
        spec = operator_spec(p.fold.op) if isinstance(p.fold, Scan) else None
        return spec is not None and spec.name == "add"

    @staticmethod
    def check(p: Parts) -> None:
        pass

    @staticmethod
    def backward(p: Parts, inputs: tuple, result: tuple, grads: Tensors, wanted: tuple[int, ...], run: Run):
        early, late = inputs[:p.early], inputs[p.early:]
        folded, cots, late_grads, _ = after_fold(p, early, late, result, grads, wanted, run)
        dscanned = zero_if_none(cots[0], folded[0])
        fold = p.fold
        back = Scan(ADD, fold.axis, None, not fold.reverse, fold.exclusive, location=fold.location)
        spread = run(PipelineIR((back,)), (dscanned,))[0]
        n = p.early
        early_wanted = tuple(i for i in wanted if i < n)
        before = p.before_function()
        return gather(pullback(before, early_wanted), early, [spread], early_wanted, run) + late_grads


# One class per kind of gradient, the first that applies taking it: a pipeline that folds more than once is cut
# into pipelines of one fold; then the closed forms before the general rule.
RULES = (Composed, NoGradient, Elementwise, ReduceRule, ScanRule, AdjointReduce, AdjointScan)


def rule(p: Parts):
    """The class in :data:`RULES` that takes ``p``'s gradient."""
    return next(r for r in RULES if r.applies(p))

# A pipeline's own backward, where its author wrote one (tc.library's softmax and norms: one kernel over the
# result and the cotangent, where the chain of pullbacks would read each row several times). Keyed by the IR,
# so an equal pipeline (built again, or parsed from its text) has it too. A rule takes the inputs, the result's
# fields, their cotangents, the positions of the inputs wanted and a Run, and returns their gradients.
DEFINED: dict[PipelineIR, Callable] = {}


def define(pipeline: PipelineIR, rule: Callable) -> None:
    """Give ``pipeline`` its own backward ``rule`` (see :data:`DEFINED`)."""
    DEFINED[pipeline] = rule


def check(pipeline: PipelineIR) -> Parts | None:
    """Raise UnsupportedError, naming the function, for a pipeline whose gradient this version does not derive (a
    ``@triton.jit`` function without a derivative, in any of its parts); else return its parts (None for a
    pipeline with its own backward). Called before the forward kernel runs, so a refused gradient launches
    nothing."""
    if pipeline in DEFINED:
        return None
    for stage in pipeline.stages:
        if isinstance(stage, (Map, ZipWith)):
            differentiable(stage.fn)
    p = parts(pipeline)
    rule(p).check(p)
    return p


def backward(pipeline: PipelineIR, inputs: tuple, result: tuple, grads: Tensors, wanted: tuple[int, ...],
             run: Run) -> list:
    """The gradient of each input in ``wanted`` (a tensor of its shape and dtype), given the cotangents
    ``grads`` of the result's fields (None for a field with none), the inputs and the ``result``."""
    p = check(pipeline)
    if p is None:
        return DEFINED[pipeline](tuple(inputs), tuple(result), grads, wanted, run)
    return rule(p).backward(p, tuple(inputs), tuple(result), grads, wanted, run)


def compose_all(p: Parts) -> Function:
    return compose(p.before + p.after, 0, p.early + p.late)


def _kept(t: torch.Tensor, fold: Reduce, axes: tuple[int, ...]) -> torch.Tensor:
    """A reduce's result (or cotangent) with its reduced axes as size 1, so it broadcasts over the stream."""
    if fold.keepdim:
        return t
    for d in sorted(axes):
        t = t.unsqueeze(d)
    return t


def _as(expr: Expr, dtype: torch.dtype) -> Expr:
    """``expr`` rounded to ``dtype``: a kernel holds a half-type stream in float32 and rounds the result once, so
    an element ties with the extreme when it equals it in the result's dtype (rounding is monotone, so the
    extreme's own elements do). A conversion to the stream's own dtype is no rounding in a kernel: the value is
    taken to float32 first, then rounded."""
    if dtype not in (torch.float16, torch.bfloat16):
        return expr
    return Call(convert_op(dtype), (Call(convert_op(torch.float32), (expr,)),))


def _row_count(before: Function, n: int, axes: tuple[int, ...], counted, extra: int) -> PipelineIR:
    """The pipeline counting, per row (the reduced ``axes`` kept), the elements of the stream before the reduce
    (``before`` of the ``n`` early inputs) for which ``counted`` of the element holds: an expression that may read
    ``extra`` inputs after the early ones (an extreme's ties read the extreme)."""
    stream = substitute(before, [Arg(i) for i in range(n)])[0]
    fn = Function(n + extra, (counted(stream),), "counted")
    return PipelineIR((ZipWith(fn) if n + extra > 1 else Map(fn), Reduce(ADD, axes, keepdim=True)))
