"""Backward kernels from scalar gradients: the cotangents a fold's later stages pass back, and gradient
expressions run as the fewest pipelines that give each input its gradient, of its shape and dtype."""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Sequence

import torch

from ..pipeline.evaluate import evaluate_fields
from ..pipeline.ir import Map, PipelineIR, Reduce, ZipWith
from ..scalar.builtins import INDEX, convert_op
from ..scalar.derivatives import pullback
from ..scalar.ir import Arg, Call, Const, Expr, Function, substitute, walk
from ..scalar.trace import BUILTINS, to_function
from .parts import Parts, jit_key

Run = Callable[[PipelineIR, tuple], list]  # runs a pipeline on tensors, returns its result's fields
Tensors = Sequence[torch.Tensor | None]

ADD = to_function(BUILTINS["add"], role="the gradient's sum")


def with_cotangents(fn: Function, arity: int, grads: Tensors) -> tuple[Function, list]:
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


class Folded(NamedTuple):
    """What :func:`after_fold` gives: the fold's result ``fields`` (their values where ``computed``, else only
    their shapes and dtypes), their cotangents, and the gradients of the late inputs."""

    fields: list
    cotangents: list
    late_grads: list
    computed: bool


def after_fold(p: Parts, early: tuple, late: tuple, result: tuple, grads: Tensors, wanted, run: Run,
               values: bool = False) -> Folded:
    """The fold's result fields, their cotangents, and the gradients of the late inputs: the stages after the
    fold pulled back (none: the result and its cotangents are the fold's own). A field's cotangent is None where
    none reaches it, and for an integer or bool field (which carries no gradient). The fold's result is
    recomputed (one kernel) only where the pullback reads it or the caller needs its ``values``; else the
    fields returned only have its shapes and dtypes."""
    if not p.after:
        folded = list(result[:p.width])
        return Folded(folded, [g if f.is_floating_point() else None for f, g in zip(folded, grads)], [], True)
    shapes = _fold_like(p, early)
    floats = tuple(i for i, f in enumerate(shapes) if f.is_floating_point())
    late_wanted = tuple(i - p.early for i in wanted if i >= p.early)
    positions = floats + tuple(p.width + j for j in late_wanted)
    pulled, cotangents = with_cotangents(pullback(p.after_function(), positions), p.width + p.late, grads)
    reads = any(isinstance(a, Arg) and a.index < p.width for a in walk(*pulled.outputs))
    folded = run(p.through_fold, early) if values or reads else shapes
    # a fold field no cotangent reaches gets None, not a tensor of zeros
    reached = tuple(k for k, f in enumerate(floats) if not isinstance(pulled.outputs[k], Const))
    keep = reached + tuple(range(len(floats), len(positions)))
    pulled = Function(pulled.arity, tuple(pulled.outputs[k] for k in keep), pulled.name, pulled.location)
    # the fold's result is a value here, not an input: its gradient is taken in its own (promoted) dtype
    outs = gather(pulled, (*folded, *late), cotangents, tuple(positions[k] for k in keep), run,
                  keep_dtype=floats)
    cots: list = [None] * p.width
    for k, out in zip(reached, outs):
        cots[floats[k]] = out
    return Folded(folded, cots, list(outs[len(reached):]), values or reads)


def _fold_like(p: Parts, early: tuple) -> list[torch.Tensor]:
    """Stand-ins for the fold's result fields, of their shapes and dtypes, holding no values (stride 0)."""
    device = early[0].device
    layouts = tuple((tuple(t.shape), t.stride(), t.dtype) for t in early)
    concrete = all(type(n) is int for shape, stride, _ in layouts for n in shape + stride)
    fields = (_fold_fields if concrete else _fold_fields.__wrapped__)(p.through_fold, layouts,
                                                                      jit_key(p.through_fold))  # (symbolic sizes
    # of a trace are not kept)
    return [torch.empty((), dtype=dtype, device=device).expand(shape) for shape, dtype in fields]


@functools.lru_cache(maxsize=256)
def _fold_fields(through_fold: PipelineIR, layouts: tuple, key: tuple) -> tuple:
    """The shape and dtype of each field of ``through_fold``'s result on inputs of ``layouts`` (shape, strides,
    dtype): torch's inference on meta tensors, kept (under ``key``, :func:`~.parts.jit_key`, beside the IR),
    since a training step asks for the same ones every call."""
    metas = [torch.empty_strided(shape, stride, dtype=dtype, device="meta") for shape, stride, dtype in layouts]
    return tuple((tuple(f.shape), f.dtype) for f in evaluate_fields(through_fold, metas))


def counted_once(fn: Function, arity: int, cotangents: Sequence[torch.Tensor], shape) -> Function:
    """``fn`` (of ``arity`` values, then ``cotangents``) with the cotangent of each result field narrower than
    ``shape`` read only where the coordinates along the axes it lacks are 0, 0 elsewhere. The field (of a tuple
    result, computed from some inputs only) was computed once a place of its own shape, so its cotangent must
    count once where a gradient kernel over ``shape`` sums its terms over those axes, not once an element."""
    rank = len(shape)
    args: list[Expr] = [Arg(i) for i in range(fn.arity)]
    for j, g in enumerate(cotangents):
        own = (1,) * (rank - g.dim()) + tuple(g.shape)
        lacks = [d for d in range(rank) if own[d] == 1 and shape[d] != 1]
        if lacks:
            first = [Call("eq", (Call(INDEX.name, (Const(d),)), Const(0))) for d in lacks]
            where = first[0]
            for c in first[1:]:
                where = Call("logical_and", (where, c))
            args[arity + j] = Call("where", (where, Arg(arity + j), Const(0.0)))
    return Function(fn.arity, tuple(substitute(fn, args)), fn.name, fn.location)


def zero_if_none(g, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if g is None else g


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
            narrow = run(first_stage(Function(fn.arity, (typed,), fn.name)), tensors)[0]
            outs[k] = summed_to(narrow.expand(shape), x.shape, run)
        elif _padded(x.shape, len(shape)) == tuple(shape):
            full.append(k)
        else:
            broadcast.append(k)
    if full:
        exprs = tuple(_typed(fn.outputs[k], inputs[wanted[k]], wanted[k] in keep_dtype) for k in full)
        outs.update(zip(full, run(first_stage(Function(fn.arity, exprs, fn.name)), tensors)))
    for k in broadcast:
        i = wanted[k]
        x = inputs[i]
        axes = tuple(d for d, n in enumerate(_padded(x.shape, len(shape))) if n == 1 and shape[d] != 1)
        stages = (first_stage(Function(fn.arity, (fn.outputs[k],), fn.name)).stages[0], Reduce(ADD, axes, keepdim=True))
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
    summed = run(PipelineIR((Reduce(ADD, axes, keepdim=True),)), (t,))[0]
    return summed.reshape(shape)


def _read_shape(expr: Expr, tensors: tuple) -> tuple:
    """The shape of ``expr``'s value: the broadcast shape of the arguments it reads (of all of them where it
    reads a coordinate, which varies over the whole iteration space: :func:`counted_once`)."""
    if any(isinstance(node, Call) and node.op == INDEX.name for node in walk(expr)):
        return tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))
    read = {a.index for a in walk(expr) if isinstance(a, Arg)}
    return tuple(torch.broadcast_shapes(*(tensors[j].shape for j in sorted(read)))) if read else ()


def _padded(shape, rank: int) -> tuple:
    return (1,) * (rank - len(shape)) + tuple(shape)


def _typed(expr: Expr, like: torch.Tensor, keep: bool) -> Expr:
    return expr if keep else Call(convert_op(like.dtype), (expr,))


def first_stage(fn: Function) -> PipelineIR:
    """``fn`` as the first stage of a pipeline: a zip_with of all its arguments (a map for one)."""
    return PipelineIR((ZipWith(fn) if fn.arity > 1 else Map(fn),))
