"""Backward pipelines: the gradient of a pipeline's inputs, computed by pipelines tricomb derives and fuses.

One class per kind of pipeline, selected by the kind of its fold (:data:`RULES`), as the forward plans are:

* :class:`Elementwise` (maps and zip_withs): one kernel, the pullback of the composed function;
* :class:`ReduceRule` (maps, a reduce, maps): the stages after the reduce pulled back first, then one kernel
  that recomputes the stream before the reduce, spreads the reduce's cotangent over it and pulls it back
  through the stages before;
* :class:`ScanRule` (maps, a scan, maps): as a reduce, with the reverse scan of the cotangent between.

What is saved for backward: the inputs and the result. The values between stages are recomputed inside the
backward kernels (a map's output is cheaper to recompute than to store and read back); the fold's result is
the pipeline's result when no stage follows it, else recomputed by the stages through the fold (one kernel).

An input that broadcasts gets its gradient summed over the axes it broadcasts along, in the same kernel: a
zip_with then a reduce over those axes (torch's ``sum_to_size``). Every gradient has its input's dtype.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

from ..errors import UnsupportedError
from ..pipeline.ir import Attach, Map, PipelineIR, Reduce, Scan, ZipWith
from ..pipeline.printer import stage_text
from ..pipeline.verify import iteration_axes, operator_spec
from ..scalar.builtins import convert_op
from ..scalar.derivatives import differentiable, pullback
from ..scalar.ir import Arg, Call, Const, Expr, Function, substitute, walk
from ..scalar.trace import BUILTINS, Traced, to_function
from .parts import Parts, compose, parts

Run = Callable[[PipelineIR, tuple], list]  # runs a pipeline on tensors, returns its result's fields
Tensors = Sequence[torch.Tensor | None]

_ADD = to_function(BUILTINS["add"], role="the gradient's sum")
_GRADIENT_OF = ("maps and zip_withs of tricomb's builtins and Python functions over them, with one reduce by "
                "sum, mean, max, min or logaddexp, or one cumsum")


_LIBRARY_HINT = ("tc.library's softmax, log_softmax, rms_norm, layer_norm and cross_entropy have their own backward "
                 "when one of them is the whole pipeline (call it apart from the stages around it)")


def _refuse(stage, why: str):
    text = stage_text(stage)
    text = text if len(text) <= 80 else text[:77] + "..."
    raise UnsupportedError(f"no gradient for {text}: {why}; this version differentiates {_GRADIENT_OF}, and "
                           f"{_LIBRARY_HINT}. Call the pipeline under torch.no_grad(), or on x.detach()",
                           getattr(stage, "location", None))


class NoGradient:
    """A reduce whose result carries no gradient (argmax and argmin's positions, any and all's bools): torch
    gives such results no grad_fn, and autograd never asks for their backward."""

    @staticmethod
    def applies(p: Parts) -> bool:
        spec = operator_spec(p.fold.op) if isinstance(p.fold, Reduce) else None
        return isinstance(p.fold, Reduce) and (p.fold.index or (spec is not None and spec.name in
                                                                ("logical_and", "logical_or")))

    @staticmethod
    def backward(p: Parts, inputs: tuple, result: tuple, grads: Tensors, wanted: tuple[int, ...], run: Run):
        return [None] * len(wanted)


class Elementwise:
    """Maps and zip_withs: one kernel (one per broadcast input) of the composed function's pullback."""

    @staticmethod
    def check(p: Parts) -> None:
        pass

    @staticmethod
    def backward(p: Parts, inputs: tuple, result: tuple, grads: Tensors, wanted: tuple[int, ...], run: Run):
        fn = compose_all(p)
        pulled, cotangents = _with_cotangents(pullback(fn, wanted), fn.arity, grads)
        return gather(pulled, inputs, cotangents, wanted, run)


class ReduceRule:
    """A reduce by sum, mean, max, min (torch's amax rule: ties share the cotangent evenly) or logaddexp
    (torch's logsumexp rule: each element's share is ``exp(s - r)``), between maps."""

    SPREAD = ("add", "maximum", "minimum", "logaddexp")

    @staticmethod
    def check(p: Parts) -> None:
        stage = p.fold
        spec = operator_spec(stage.op)
        if spec is None or spec.name not in ReduceRule.SPREAD or stage.index or stage.skip_nan:
            _refuse(stage, "its gradient is not derived yet")

    @staticmethod
    def backward(p: Parts, inputs: tuple, result: tuple, grads: Tensors, wanted: tuple[int, ...], run: Run):
        early, late = inputs[:p.early], inputs[p.early:]
        reduced, dreduced, late_grads = _after_fold(p, early, late, result, grads, wanted, run)
        shape = torch.broadcast_shapes(*(t.shape for t in early))
        axes = iteration_axes(p.fold, len(shape))
        kept = _kept(reduced, p.fold, axes)
        spread = _kept(dreduced, p.fold, axes)
        name = operator_spec(p.fold.op).name
        if p.fold.mean:
            spread = spread / math.prod(shape[d] for d in axes)
        before = p.before_function()
        n = p.early
        stream = substitute(before, [Arg(i) for i in range(n)])[0]
        # the stream's cotangent, over arguments n (the spread cotangent), n + 1 (the result), n + 2 (ties)
        g, r = Traced(Arg(n)), Traced(Arg(n + 1))
        if name in ("maximum", "minimum"):
            extras = [spread, kept, run(_tie_count(before, n, axes, kept.dtype), (*early, kept))[0]]
            share = (g / Traced(Arg(n + 2))) * (Traced(_as(stream, kept.dtype)) == r)
        elif name == "logaddexp":
            extras, share = [spread, kept], g * BUILTINS["exp"](Traced(stream) - r)
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

    @staticmethod
    def check(p: Parts) -> None:
        spec = operator_spec(p.fold.op)
        if spec is None or spec.name != "add" or p.fold.index:
            _refuse(p.fold, "its gradient is not derived yet")

    @staticmethod
    def backward(p: Parts, inputs: tuple, result: tuple, grads: Tensors, wanted: tuple[int, ...], run: Run):
        early, late = inputs[:p.early], inputs[p.early:]
        _, dscanned, late_grads = _after_fold(p, early, late, result, grads, wanted, run)
        fold = p.fold
        back = Scan(_ADD, fold.axis, None, not fold.reverse, fold.exclusive, location=fold.location)
        spread = run(PipelineIR((back,)), (dscanned,))[0]
        n = p.early
        early_wanted = tuple(i for i in wanted if i < n)
        before = p.before_function()
        return gather(pullback(before, early_wanted), early, [spread], early_wanted, run) + late_grads


RULES = {type(None): Elementwise, Reduce: ReduceRule, Scan: ScanRule}

# A pipeline's own backward, where its author wrote one (tc.library's softmax and norms: one kernel over the
# result and the cotangent, where the chain of pullbacks would read each row several times). Keyed by the IR,
# so an equal pipeline (built again, or parsed from its text) has it too. A rule takes the inputs, the result's
# fields, their cotangents, the positions of the inputs wanted and a Run, and returns their gradients.
DEFINED: dict[PipelineIR, Callable] = {}


def define(pipeline: PipelineIR, rule: Callable) -> None:
    """Give ``pipeline`` its own backward ``rule`` (see :data:`DEFINED`)."""
    DEFINED[pipeline] = rule


def check(pipeline: PipelineIR) -> Parts | None:
    """Raise UnsupportedError, naming the stage, for a pipeline whose gradient this version does not derive;
    else return its parts (None for a pipeline with its own backward). Called before the forward kernel runs,
    so a refused gradient launches nothing."""
    if pipeline in DEFINED:
        return None
    for stage in pipeline.stages:
        if isinstance(stage, Attach):
            _refuse(stage, "gradients through attach are not derived yet")
        if isinstance(stage, (Map, ZipWith)):
            differentiable(stage.fn)
    p = parts(pipeline)
    for stage in p.after:
        if not isinstance(stage, (Map, ZipWith)):
            _refuse(stage, "a second reduce or scan has no derived gradient yet")
    if not NoGradient.applies(p):
        RULES[type(p.fold)].check(p)
    return p


def backward(pipeline: PipelineIR, inputs: tuple, result: tuple, grads: Tensors, wanted: tuple[int, ...],
             run: Run) -> list:
    """The gradient of each input in ``wanted`` (a tensor of its shape and dtype), given the cotangents
    ``grads`` of the result's fields (None for a field with none), the inputs and the ``result``."""
    p = check(pipeline)
    if p is None:
        return DEFINED[pipeline](tuple(inputs), tuple(result), grads, wanted, run)
    if NoGradient.applies(p):
        return NoGradient.backward(p, inputs, result, grads, wanted, run)
    return RULES[type(p.fold)].backward(p, tuple(inputs), tuple(result), grads, wanted, run)


def compose_all(p: Parts) -> Function:
    return compose(p.before + p.after, 0, p.early + p.late)


def _with_cotangents(fn: Function, arity: int, grads: Tensors) -> tuple[Function, list]:
    """``fn`` (arguments: ``arity`` values, then one cotangent per result field) with the cotangents that are
    None replaced by 0.0, and the tensors of those that are given."""
    args: list[Expr] = [Arg(i) for i in range(arity)]
    given = []
    for g in grads:
        if g is None:
            args.append(Const(0.0))
        else:
            args.append(Arg(arity + len(given)))
            given.append(g)
    return Function(arity + len(given), tuple(substitute(fn, args)), fn.name, fn.location), given


def _after_fold(p: Parts, early: tuple, late: tuple, result: tuple, grads: Tensors, wanted, run: Run):
    """The fold's result, its cotangent, and the gradients of the late inputs: the stages after the fold
    pulled back (none: the result and its cotangent are the fold's own)."""
    if not p.after:
        return result[0], _zero_if_none(grads[0], result[0]), []
    folded = run(p.through_fold, early)[0]
    late_wanted = tuple(i - p.early for i in wanted if i >= p.early)
    pulled, cotangents = _with_cotangents(pullback(p.after_function(), (0, *(1 + j for j in late_wanted))),
                                          1 + p.late, grads)
    # the fold's result is a value here, not an input: its gradient is taken in its own (promoted) dtype
    outs = gather(pulled, (folded, *late), cotangents, (0, *(1 + j for j in late_wanted)), run, keep_dtype=(0,))
    return folded, outs[0], list(outs[1:])


def _zero_if_none(g, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if g is None else g


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


def _tie_count(before: Function, n: int, axes: tuple[int, ...], dtype: torch.dtype) -> PipelineIR:
    """The pipeline counting, per row, the elements equal to the row's extreme (input ``n``, kept dims, of
    ``dtype``)."""
    stream = substitute(before, [Arg(i) for i in range(n)])[0]
    equal = Function(n + 1, (Call("eq", (_as(stream, dtype), Arg(n))),), "ties")
    return PipelineIR((ZipWith(equal) if n + 1 > 1 else Map(equal), Reduce(_ADD, axes, keepdim=True)))


def gather(fn: Function, inputs: tuple, extras: Sequence[torch.Tensor], wanted: tuple[int, ...], run: Run,
           keep_dtype: tuple[int, ...] = ()) -> list:
    """Run ``fn`` (a function of ``inputs`` then ``extras``, one result per input in ``wanted``, in order) as
    kernels: one for the inputs of the full broadcast shape (a tuple result), one for each input that
    broadcasts, reducing over the axes it broadcasts along. A result that is an argument of the input's dtype
    (a sum's cotangent) is that tensor expanded (summed where the input broadcasts), a constant one zeros, and
    one that reads arguments of a narrower shape than all of them is computed on that shape and then summed as
    an argument is. Each gradient gets its input's shape and dtype (but the positions in ``keep_dtype``, which
    keep the dtype ``fn`` computes)."""
    tensors = tuple(inputs) + tuple(extras)
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    outs: dict[int, torch.Tensor] = {}
    full, broadcast = [], []
    for k, i in enumerate(wanted):
        out, x = fn.outputs[k], inputs[i]
        if isinstance(out, Const):  # no result depends on this input (a step, a comparison): zeros, as torch's
            outs[k] = torch.zeros_like(x)
        elif isinstance(out, Arg) and (tensors[out.index].dtype == x.dtype or i in keep_dtype):
            outs[k] = summed_to(tensors[out.index].expand(shape), x.shape, run)
        elif _read_shape(out, tensors) != tuple(shape):
            typed = _typed(out, x, i in keep_dtype)
            narrow = run(_first_stage(Function(fn.arity, (typed,), fn.name)), tensors)[0]
            outs[k] = summed_to(narrow.expand(shape), x.shape, run)
        elif _padded(x.shape, len(shape)) == tuple(shape):
            full.append(k)
        else:
            broadcast.append(k)
    if full:
        exprs = tuple(_typed(fn.outputs[k], inputs[wanted[k]], wanted[k] in keep_dtype) for k in full)
        outs.update(zip(full, run(_first_stage(Function(fn.arity, exprs, fn.name)), tensors)))
    for k in broadcast:
        i = wanted[k]
        x = inputs[i]
        axes = tuple(d for d, n in enumerate(_padded(x.shape, len(shape))) if n == 1 and shape[d] != 1)
        stages = (_first_stage(Function(fn.arity, (fn.outputs[k],), fn.name)).stages[0], Reduce(_ADD, axes, keepdim=True))
        if i not in keep_dtype:
            stages += (Map(Function(1, (Call(convert_op(x.dtype), (Arg(0),)),), "to_dtype")),)
        outs[k] = run(PipelineIR(stages), tensors)[0].reshape(x.shape)
    return [outs[k] for k in range(len(wanted))]


def summed_to(t: torch.Tensor, shape, run: Run) -> torch.Tensor:
    """``t`` (of the full shape, expanded views too) as a gradient of ``shape``: summed (one kernel) along the
    axes where an input of ``shape`` broadcasts, a view where there are none."""
    full = t.shape
    axes = tuple(d for d, n in enumerate(_padded(shape, len(full))) if n == 1 and full[d] != 1)
    if not axes:
        return t.reshape(shape)
    summed = run(PipelineIR((Reduce(_ADD, axes, keepdim=True),)), (t,))[0]
    return summed.reshape(shape)


def _read_shape(expr: Expr, tensors: tuple) -> tuple:
    """The shape of ``expr``'s value: the broadcast shape of the arguments it reads."""
    read = {a.index for a in walk(expr) if isinstance(a, Arg)}
    return tuple(torch.broadcast_shapes(*(tensors[j].shape for j in sorted(read)))) if read else ()


def _padded(shape, rank: int) -> tuple:
    return (1,) * (rank - len(shape)) + tuple(shape)


def _typed(expr: Expr, like: torch.Tensor, keep: bool) -> Expr:
    return expr if keep else Call(convert_op(like.dtype), (expr,))


def _first_stage(fn: Function) -> PipelineIR:
    """``fn`` as the first stage of a pipeline: a zip_with of all its arguments (a map for one)."""
    return PipelineIR((ZipWith(fn) if fn.arity > 1 else Map(fn),))
