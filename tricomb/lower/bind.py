"""Binding a pipeline to its input tensors: checks, shapes, and the layout the kernel iterates over.

The kernel walks an *iteration space*: the broadcast shape of the inputs that join before the reduce or scan.
Each dimension is ``kept`` (it indexes the output) or ``reduced`` (combined by the reduce or scan). Every
tensor the kernel touches gets a stride for each dimension (0 where it broadcasts), and neighbouring dimensions
of the same kind merge into one :class:`Group` when every tensor's strides allow it, as TensorIterator does.
A contiguous input therefore becomes one group and a flat index; a transposed or sliced one keeps more.

No input is ever copied to contiguous: the kernel reads strided, offset and expanded inputs where they lie, and
walks dimensions in memory order where the result allows (:func:`_iteration_order`). The measured reason is in
``bench/results/h200.md``, cases L1-L4: each compares reading in place with copying to contiguous first.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import is_fake

from ..errors import (AliasError, ArgumentError, ArityError, AxisError, DeviceError, DTypeError, ShapeError, TricombError,
                      UnsupportedError, caller_location)
from ..pipeline.evaluate import evaluate_fields
from ..pipeline.scalars import not_an_input
from ..pipeline.ir import Attach, Map, PipelineIR, Reduce, Scan, ZipWith, new_inputs
from ..pipeline.verify import check_callable, iteration_axes, operator_commutes
from .coordinates import coordinate_dims, index_axes

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16,
                    torch.int32, torch.int64, torch.uint8, torch.bool)


@dataclass(frozen=True, slots=True)
class Group:
    """Adjacent dimensions of one kind, merged: ``dims`` from outer to inner."""

    kind: str  # "kept" or "reduced"
    dims: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Binding:
    """What a kernel plan depends on, beyond the pipeline: the cache key for inputs of one layout class."""

    device_type: str
    dtypes: tuple[torch.dtype, ...]
    ranks: tuple[int, ...]
    rank: int  # rank of the iteration space
    axes: tuple[int, ...]  # reduced or scanned dimensions of the iteration space
    groups: tuple[Group, ...]  # in the order the kernel walks them, outer to inner
    out_dtypes: tuple[torch.dtype, ...]  # per result field
    out_orders: tuple[tuple[int, ...], ...]  # per result field: torch's memory order of its dimensions
    default_dtype: torch.dtype  # torch.get_default_dtype(): the dtype of Python floats meeting integers
    # per input: constant along the folded axes (stride 0 along each of size > 1), so loaded once a row
    row_inputs: tuple[bool, ...] = ()
    # per input, with fields summed over the rows: constant along the kept axes (a norm's weight), so loaded once by
    # a program stepping through row tiles
    column_inputs: tuple[bool, ...] = ()


def combine_stage(pipeline: PipelineIR, start: int = 0) -> tuple[int, Reduce | Scan | None]:
    """The index and stage of the pipeline's first reduce or scan from stage ``start`` on (``(len, None)`` when
    there is none)."""
    for i, stage in enumerate(pipeline.stages[start:], start):
        if isinstance(stage, (Reduce, Scan)):
            return i, stage
    return len(pipeline.stages), None


def final_reduce(pipeline: PipelineIR, rank: int) -> tuple[int, Reduce | None]:
    """The reduce that follows the pipeline's scan, if any (the fused pair scan-then-reduce), checked to reduce
    exactly the scanned axis: ``(index, stage)``, or ``(len, None)``."""
    at, first = combine_stage(pipeline)
    then_at, then = combine_stage(pipeline, at + 1)
    if then is None or not isinstance(first, Scan):  # (a reduce after a reduce is the reduce over the rows)
        return len(pipeline.stages), None
    if iteration_axes(then, rank) != iteration_axes(first, rank) or then.index:
        raise UnsupportedError("a scan and a reduce after it fuse into one kernel when the reduce is over exactly "
                               "the scanned axis (and is not argmax/argmin); split the pipeline in two",
                               then.location)
    return then_at, then


def rows_reduce(pipeline: PipelineIR) -> tuple[int, Reduce | None]:
    """The reduce over the rows: a reduce after the pipeline's first reduce, folding the rows' results over all
    the axes that one leaves (:func:`~tricomb.pipeline.verify.verify` allows no other stage there): ``(index,
    stage)``, or ``(len, None)``."""
    at, first = combine_stage(pipeline)
    then_at, then = combine_stage(pipeline, at + 1)
    if not isinstance(first, Reduce) or then is None:
        return len(pipeline.stages), None
    return then_at, then


def _check_rows_axes(stage: Reduce, rows: tuple[int, ...]) -> tuple[int, ...]:
    """The reduce over the rows folds every axis of the stream of shape ``rows`` the reduce before it left;
    returns its result's shape."""
    if tuple(iteration_axes(stage, len(rows))) != tuple(range(len(rows))):
        raise UnsupportedError(f"this reduce folds axes {list(iteration_axes(stage, len(rows)))} of the stream of "
                               f"shape {rows} that the reduce before it left; one kernel reduces the rows' results "
                               "over all of its axes (axis=None). Split the pipeline to keep some", stage.location)
    return (1,) * len(rows) if stage.keepdim else ()


def input_stages(pipeline: PipelineIR) -> list[int]:
    """For each pipeline input, the index of the stage that brings it in."""
    owners: list[int] = []
    for i, count in enumerate(new_inputs(pipeline.stages)):
        owners += [i] * count
    return owners


def fold_context(pipeline: PipelineIR, at: int) -> tuple[PipelineIR, int, Reduce | Scan]:
    """The reduce or scan that the stage at ``at`` folds with, in a pipeline whose stages lead to it: the stage
    itself, or an attach's reduce, which continues the stages before the attach with its pipeline's (so
    :func:`combined_dtypes` and the lift before it read as for any reduce). Returns ``(pipeline, position,
    stage)``."""
    stage = pipeline.stages[at]
    if not isinstance(stage, Attach):
        return pipeline, at, stage
    return PipelineIR(pipeline.stages[:at] + stage.pipeline.stages), at + stage.reduce_at, stage.reduce


def combined_dtypes(pipeline: PipelineIR, binding: Binding, at: int) -> tuple[torch.dtype, ...]:
    """torch's dtype for each field of the stream right after stage ``at``."""
    owners = input_stages(pipeline)
    metas = [torch.empty((1,) * rank, dtype=dtype, device="meta")
             for dtype, rank, owner in zip(binding.dtypes, binding.ranks, owners) if owner <= at]
    return tuple(t.dtype for t in evaluate_fields(PipelineIR(pipeline.stages[:at + 1]), metas))


def check_arity(pipeline: PipelineIR, tensors: tuple) -> None:
    """Raise ArityError, at the caller's line, when ``tensors`` are not one per input of ``pipeline``."""
    expected = pipeline.num_inputs
    if len(tensors) != expected:
        packed = len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) and len(tensors[0]) == expected
        hint = f" (a {type(tensors[0]).__name__} of {expected}: unpack it, pipe(*inputs))" if packed else ""
        raise ArityError(f"the pipeline takes {expected} input tensor(s) but was called with {len(tensors)}{hint}; "
                         "pass one tensor per input (zip_with adds inputs)", caller_location())


def _check_tensors(pipeline: PipelineIR, tensors: tuple) -> None:
    check_callable(pipeline)
    check_arity(pipeline, tensors)
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise not_an_input(t, i)
        check_readable(i, t)
        if t.is_neg() or t.is_conj():
            raise DTypeError(f"input {i} is a torch.strided tensor with a lazy negation or conjugation; "
                             "pass a plain dense tensor (.resolve_neg(), .resolve_conj())")
        if t.dtype not in SUPPORTED_DTYPES:
            names = ", ".join(str(d).replace("torch.", "") for d in SUPPORTED_DTYPES)
            raise DTypeError(f"input {i} has dtype {str(t.dtype).replace('torch.', '')}; this version handles "
                             f"{names}. Convert it with .to(torch.float32)")
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        listed = ", ".join(f"input {i} on {t.device}" for i, t in enumerate(tensors))
        raise DeviceError(f"inputs are on different devices ({listed}); move them to one device with .to(device)")
    device = tensors[0].device
    if device.type not in ("cuda", "cpu"):
        raise DeviceError(f"inputs are on {device}; tricomb runs on CUDA devices, and on the CPU through "
                          "Triton's interpreter")


def check_readable(i: int, t: torch.Tensor, location=None) -> None:
    """Raise DTypeError for input ``i`` of a kind a kernel cannot read (:func:`unreadable_kind`); a tracer's
    tensor passes (its launch is recorded, not run)."""
    unreadable = None if is_fake(t) else unreadable_kind(t)
    if unreadable is not None:
        raise DTypeError(f"input {i} is {unreadable[0]}; pass a plain dense tensor ({unreadable[1]})", location)


def unreadable_kind(t: torch.Tensor) -> tuple[str, str] | None:
    """What keeps a kernel from reading ``t``'s elements where its strides say, and what to pass instead, as
    words for a message; None for a plain strided tensor (a plain subclass of torch.Tensor included). The kinds:
    a nested tensor (whose sizes torch itself cannot give), a sparse or mkldnn layout, a tensor subclass with
    its own ``__torch_dispatch__`` (a FakeTensor, a wrapper such as DTensor: no memory of its own to read), and
    a tensor inside a torch.func transform (vmap, grad). Reads only the type and flags, so it is safe on all."""
    functorch = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None)
    functional = getattr(torch, "_is_functional_tensor", None)
    if t.is_nested:
        return "a nested tensor", "pad it with .to_padded_tensor(0.0), or call the pipeline on each component"
    if t.layout != torch.strided:
        return f"a {t.layout} tensor", ".to_dense()"
    if type(t).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__:
        return (f"a {type(t).__name__}, a tensor subclass with its own __torch_dispatch__ and no memory tricomb can "
                "read", "the real tensor it stands for")
    if (functorch is not None and functorch(t)) or (functional is not None and functional(t)):
        return ("a tensor inside a torch.func transform (grad, vjp, jvp, vmap, functionalize), which a kernel cannot "
                "see into", "call the pipeline outside the transform: torch.autograd.grad or .backward() for "
                "gradients, an extra dimension for a batch")
    return None


def _broadcast(shapes: list[torch.Size], what: str, location) -> torch.Size:
    try:
        return torch.broadcast_shapes(*shapes)
    except RuntimeError:
        listed = " and ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(f"{what}: shapes {listed} do not broadcast together (torch's rules: trailing dimensions "
                         "must be equal or 1); reshape or expand the inputs", location) from None


def _broadcast_inputs(pipeline: PipelineIR, tensors: tuple, after: tuple[bool, ...], owners: list[int]) -> tuple:
    """The broadcast shape of the inputs read before the reduce/scan. When one does not broadcast with those
    before it, the error names it and the stage that brings it in, at the user's line. An input brought in after
    an attach broadcasts to the stream's shape there: the attached reduction was taken over that shape."""
    shape = None
    first_attach = next((i for i, s in enumerate(pipeline.stages) if isinstance(s, Attach)), len(pipeline.stages))
    for i, (t, a, owner) in enumerate(zip(tensors, after, owners)):
        if a:
            continue
        grown = shape
        try:
            shape = t.shape if shape is None else torch.broadcast_shapes(shape, t.shape)
        except RuntimeError:
            stage = pipeline.stages[owner]
            raise ShapeError(f"input {i} of the pipeline, brought in by this {_STAGE_NAMES[type(stage)]}, has shape "
                             f"{tuple(t.shape)}, which does not broadcast with shape {tuple(shape)} of the inputs "
                             "before it (torch's rules: trailing dimensions must be equal or 1); reshape or expand "
                             "the inputs", stage.location) from None
        if owner > first_attach and shape != grown:
            raise ShapeError(f"input {i} of the pipeline, of shape {tuple(t.shape)}, joins after an attach and would "
                             f"grow the stream's shape {tuple(grown)}, over which the attached reduction was taken; "
                             "inputs added after an attach must broadcast to the stream's shape (zip_with the "
                             "input before the attach)", pipeline.stages[owner].location)
    return tuple(shape)


_STAGE_NAMES = {Map: "map", ZipWith: "zip_with", Reduce: "reduce", Scan: "scan", Attach: "attach"}


def out_shape(shape: torch.Size, stage: Reduce | Scan | None, axes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of the stream after the reduce (or scan) ``stage``."""
    if not isinstance(stage, Reduce):
        return tuple(shape)
    if stage.keepdim:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def iteration_strides(t: torch.Tensor, shape: tuple[int, ...], after: bool, stage, axes) -> tuple[int, ...]:
    """``t``'s stride for each dimension of the iteration space ``shape`` (0 where it broadcasts).

    A tensor joining after a reduce is shaped like the reduce's output: it gets stride 0 on reduced dims.
    """
    if not after or not isinstance(stage, Reduce):
        return tuple(t.expand(shape).stride())
    reduced = out_shape(torch.Size(shape), stage, axes)
    strides = list(t.expand(reduced).stride())
    if stage.keepdim:
        return tuple(0 if d in axes else s for d, s in enumerate(strides))
    for a in axes:
        strides.insert(a, 0)
    return tuple(strides)


def coalesce(shape: tuple[int, ...], axes: tuple[int, ...], strides: list[tuple[int, ...]],
             order: tuple[int, ...] | None = None, alone: frozenset[int] = frozenset()) -> tuple[Group, ...]:
    """Merge dimensions of one kind, neighbours in the walk ``order`` (outer to inner; default: logical), whose
    strides make them one run in every tensor; a dimension in ``alone`` (one whose coordinate a stage reads)
    merges with none.

    Size-1 dimensions are dropped: their index is always 0.
    """
    groups: list[tuple[str, list[int], int]] = []  # kind, dims (inner first), size so far
    for d in reversed(order if order is not None else range(len(shape))):
        if shape[d] == 1:
            continue
        kind = "reduced" if d in axes else "kept"
        if groups:
            g_kind, g_dims, g_size = groups[-1]
            inner = g_dims[0]
            merges = d not in alone and inner not in alone
            if merges and g_kind == kind and all(s[d] == s[inner] * g_size for s in strides):
                g_dims.append(d)
                groups[-1] = (g_kind, g_dims, g_size * shape[d])
                continue
        groups.append((kind, [d], shape[d]))
    return tuple(Group(kind, tuple(reversed(dims))) for kind, dims, _ in reversed(groups))


@dataclass(frozen=True, slots=True)
class Field:
    """One field of torch's result: its shape, strides and dtype (from a meta evaluation)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @property
    def order(self) -> tuple[int, ...]:
        """Its dimensions from outermost to innermost in memory (torch keeps a permuted layout for elementwise
        results of permuted inputs, and gives reductions and scans contiguous ones)."""
        return tuple(sorted(range(len(self.shape)), key=lambda d: (-self.stride[d], d)))


@functools.lru_cache(maxsize=4096)
def result_fields(pipeline: PipelineIR, inputs: tuple[tuple[tuple[int, ...], tuple[int, ...], torch.dtype], ...],
                  default: torch.dtype) -> tuple[Field, ...]:
    """torch's result for ``pipeline`` on inputs of these shapes, strides and dtypes, evaluated on meta tensors;
    ``default`` is torch's default dtype, which decides the dtype of Python floats meeting integers."""
    metas = [torch.empty_strided(shape, stride, dtype=dtype, device="meta") for shape, stride, dtype in inputs]
    fields = evaluate_fields(pipeline, metas, explain_errors=True)
    # a field that is an input passed through (an expanded one, say) is a new tensor laid out as torch's clone
    fresh = [torch.empty_like(t) if any(t is m for m in metas) else t for t in fields]
    return tuple(Field(tuple(t.shape), tuple(t.stride()), t.dtype) for t in fresh)


def _iteration_order(fields: tuple[Field, ...], rank: int, stage, axes: tuple[int, ...],
                     first: tuple[int, ...]) -> tuple[int, ...]:
    """The order (outer to inner) in which the kernel walks the iteration space's dimensions.

    Elementwise plans: the memory order of the first full-rank result, so a permuted input and its permuted
    result are both walked contiguously. Reductions (not argmax/argmin, whose positions are row-major): the kept
    dimensions in logical order (the result is contiguous), then the reduced ones in the memory order of the
    first input ``first`` (its strides), so a transposed input is still summed as one contiguous run. Scans: the
    logical order.
    """
    full = [f for f in fields if len(f.shape) == rank]
    if stage is None:
        return full[0].order if full else tuple(range(rank))
    if isinstance(stage, Reduce) and not stage.index and operator_commutes(stage):
        kept = [d for d in range(rank) if d not in axes]
        return tuple(kept + sorted(axes, key=lambda d: (-abs(first[d]), d)))
    return tuple(range(rank))


def bind(pipeline: PipelineIR, tensors: tuple, out=None) -> tuple[Binding, tuple[Field, ...]]:
    """Check ``tensors`` (and ``out``) against ``pipeline``; return their layout class and torch's result fields.

    Raises :class:`TricombError` subclasses for a wrong number of inputs, non-tensors, unsupported dtypes,
    mixed devices, shapes that do not broadcast, axes out of range, and an ``out`` that does not fit; an error
    that no stage caused is located at the user's call.
    """
    try:
        return _bind(pipeline, tensors, out)
    except TricombError as exc:
        if exc.location is not None:
            raise
        raise type(exc)(exc.message, caller_location()) from None


def check_constant_along(pipeline: PipelineIR, tensors: tuple) -> None:
    """The check of inputs that must be constant along axes of the stream (:func:`_check_constant_along`) for
    tensors whose sizes may be symbolic (a tracer's: the operator's fake implementation runs it, so that a
    traced call is told what an eager one is), not cached."""
    if any(isinstance(s, ZipWith) and s.constant_along for s in pipeline.stages):
        _check_constant_along.__wrapped__(pipeline, tuple((tuple(t.shape), t.dtype) for t in tensors))


def _bind(pipeline: PipelineIR, tensors: tuple, out) -> tuple[Binding, tuple[Field, ...]]:
    _check_tensors(pipeline, tensors)
    at, stage = combine_stage(pipeline)
    owners = input_stages(pipeline)
    after = tuple(owner > at for owner in owners)
    if any(isinstance(s, ZipWith) and s.constant_along for s in pipeline.stages):
        _check_constant_along(pipeline, tuple((tuple(t.shape), t.dtype) for t in tensors))
    shape = _broadcast_inputs(pipeline, tensors, after, owners)
    folded = _folded_stages(pipeline)
    axes = _same_axes(folded, len(shape))
    then_at, then = final_reduce(pipeline, len(shape))
    late = tuple(owner > then_at for owner in owners)
    for t, a, lt, owner in zip(tensors, after, late, owners):
        reduced = out_shape(torch.Size(shape), then if lt else stage, axes)
        if a and tuple(_broadcast([reduced, t.shape], "an input added after the reduce/scan",
                                  pipeline.stages[owner].location)) != reduced:
            raise ShapeError(f"an input of shape {tuple(t.shape)} joins a stream of shape {reduced} after the "
                             "reduce/scan and would grow it; inputs added there must broadcast to the stream's "
                             "shape", pipeline.stages[owner].location)
    fields = result_fields(pipeline, tuple((tuple(t.shape), tuple(t.stride()), t.dtype) for t in tensors),
                           torch.get_default_dtype())
    final = then or stage
    _check_folded_streams(pipeline, tuple((tuple(t.shape), t.dtype) for t in tensors), tuple(shape))
    attached = any(isinstance(s, Attach) for s in pipeline.stages)
    result = out_shape(torch.Size(shape), final, axes)
    _, over_rows = rows_reduce(pipeline)
    if over_rows is not None:
        final, result = over_rows, _check_rows_axes(over_rows, result)
    _check_field_shapes(pipeline, fields, result, final, attached)
    outs = check_out(out, fields, tensors, in_place=_in_place_refused(pipeline)) if out is not None else \
        [torch.empty_strided(f.shape, f.stride, dtype=f.dtype, device="meta") for f in fields]
    strides = [iteration_strides(t, shape, a, then if lt else stage, axes) for t, a, lt in zip(tensors, after, late)]
    strides += [(0,) * len(shape) if over_rows is not None else iteration_strides(o, shape, True, final, axes)
                for o in outs]
    order = _iteration_order(fields, len(shape), _order_stage(folded), axes, strides[0])
    ranks = tuple(t.dim() for t in tensors)
    read = coordinate_dims(pipeline, ranks, len(shape), axes)
    if read:
        _check_indexed_stages(pipeline, tuple((tuple(t.shape), t.dtype) for t in tensors), tuple(shape))
    binding = Binding(tensors[0].device.type, tuple(t.dtype for t in tensors), ranks,
                      len(shape), axes, coalesce(shape, axes, strides, order, read), tuple(f.dtype for f in fields),
                      tuple(f.order for f in fields), torch.get_default_dtype(),
                      _row_inputs(shape, axes, strides[:len(tensors)]),
                      _column_inputs(shape, axes, strides[:len(tensors)]) if pipeline.column_sums else ())
    return binding, fields


def _row_inputs(shape, axes: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[bool, ...]:
    """Per input, whether it is constant along rows of more than one element: stride 0 along every folded
    dimension of size > 1 (rows of no element read nothing, not even once)."""
    long = math.prod(shape[d] for d in axes) > 1
    return tuple(long and all(st[d] == 0 for d in axes if shape[d] > 1) for st in strides)


def _column_inputs(shape, axes: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[bool, ...]:
    """Per input, whether it is constant along the kept axes of more than one row: stride 0 along every kept
    dimension of size > 1."""
    kept = [d for d in range(len(shape)) if d not in axes]
    many = bool(axes) and math.prod(shape[d] for d in kept) > 1
    return tuple(many and all(st[d] == 0 for d in kept if shape[d] > 1) for st in strides)


def _folded_stages(pipeline: PipelineIR) -> list[Reduce | Scan]:
    """The reduces and scans whose axes are the kernel's folded axes: each attach's reduce, then the pipeline's
    first reduce or scan (a reduce fused after a scan is checked by :func:`final_reduce`)."""
    folded = [s.reduce for s in pipeline.stages if isinstance(s, Attach)]
    _, stage = combine_stage(pipeline)
    return folded + ([stage] if stage is not None else [])


def _same_axes(folded: list[Reduce | Scan], rank: int) -> tuple[int, ...]:
    """The folded axes of the iteration space: one set, which every attach and the reduce after them fold."""
    if not folded:
        return ()
    axes = iteration_axes(folded[0], rank)
    for stage in folded[1:]:
        if iteration_axes(stage, rank) != axes:
            raise UnsupportedError(f"this {_STAGE_NAMES[type(stage)]} folds axes {list(iteration_axes(stage, rank))} "
                                   f"but the attach before it folds {list(axes)}: one kernel folds one set of axes. "
                                   "Reduce the same axes, or split the pipeline", stage.location)
    return axes


def _order_stage(folded: list[Reduce | Scan]) -> Reduce | Scan | None:
    """The fold that decides the walk order (:func:`_iteration_order`): one that needs row-major order (an
    argmax's positions, an operator that does not commute) if any, else the first."""
    ordered = [s for s in folded if isinstance(s, Scan) or s.index or not operator_commutes(s)]
    return (ordered or folded or [None])[0]


def _entering(pipeline: PipelineIR, inputs: tuple[tuple[tuple[int, ...], torch.dtype], ...], at: int):
    """Meta tensors of the stream's fields entering stage ``at`` (none for the first stage), and the inputs it
    brings in, as ``(index, meta tensor)``; ``inputs`` gives each input's shape and dtype."""
    owners = input_stages(pipeline)
    metas = [torch.empty(size, dtype=dtype, device="meta") for size, dtype in inputs]
    before = [m for m, owner in zip(metas, owners) if owner < at]
    stream = evaluate_fields(PipelineIR(pipeline.stages[:at]), before) if at else []
    return stream, [(i, m) for i, (m, owner) in enumerate(zip(metas, owners)) if owner == at]


@functools.lru_cache(maxsize=4096)
def _check_folded_streams(pipeline: PipelineIR, inputs: tuple[tuple[tuple[int, ...], torch.dtype], ...],
                          shape: tuple[int, ...]) -> None:
    """The stream entering each reduce, scan or attach spans the iteration space ``shape``, over which the kernel
    folds: a stream computed from only some of the inputs (``zip_with (x, y) -> y``, y smaller than x) is
    smaller in torch's meaning, and folding it over the broadcast would count its elements more than once.
    ``inputs``: each input's shape and dtype. (Cached as :func:`result_fields` is: a repeated call runs no torch
    op.)"""
    rows_at, _ = rows_reduce(pipeline)
    for at, stage in enumerate(pipeline.stages):
        if at == 0 or at == rows_at or not isinstance(stage, (Reduce, Scan, Attach)):
            continue  # (the reduce over the rows folds the rows' results, not the iteration space)
        entering = torch.broadcast_shapes(*(f.shape for f in _entering(pipeline, inputs, at)[0]))
        if tuple(entering) != tuple(shape):
            raise UnsupportedError(f"the stream entering this {_STAGE_NAMES[type(stage)]} has shape "
                                   f"{tuple(entering)}, smaller than its inputs' broadcast {tuple(shape)} (a field "
                                   "computed from only some of the inputs keeps their shape, as in torch); the kernel "
                                   "folds the broadcast. Broadcast it in the function (where(x == x, y, y)), or "
                                   "fold it in a separate pipeline", stage.location)


@functools.lru_cache(maxsize=4096)
def _check_constant_along(pipeline: PipelineIR, inputs: tuple[tuple[tuple[int, ...], torch.dtype], ...]) -> None:
    """Each input a zip_with with ``constant_along`` brings in has size 1 along those axes of the stream it joins
    (the broadcast of the stream's fields; of the stage's inputs for a first stage), a missing leading axis
    counting as size 1. Checked before the inputs are broadcast, so that a target missing its class axis is told
    so rather than that it does not broadcast."""
    for at, stage in enumerate(pipeline.stages):
        if not (isinstance(stage, ZipWith) and stage.constant_along):
            continue
        stream, joining = _entering(pipeline, inputs, at)
        full = torch.broadcast_shapes(*(t.shape for t in (stream or [m for _, m in joining])))
        for axis in stage.constant_along:
            if not full:
                raise AxisError(f"constant_along={axis}: the stream this zip_with joins is 0-d, with no axis",
                                stage.location)
            if not -len(full) <= axis < len(full):
                raise AxisError(f"constant_along={axis} is out of range for the stream of shape {tuple(full)} this "
                                f"zip_with joins; use an axis in [{-len(full)}, {len(full) - 1}]", stage.location)
            for i, m in joining:
                k = axis % len(full) - len(full) + m.dim()  # the input's own axis, aligned from the right
                if k >= 0 and m.shape[k] != 1:
                    raise ShapeError(f"input {i} of shape {tuple(m.shape)} must have size 1 along axis {axis} of the "
                                     f"stream {tuple(full)} it joins (constant_along={axis}), so that it broadcasts "
                                     f"along that axis: keep the axis, as target[:, None] keeps the class axis of a "
                                     "(N,) target", stage.location)


@functools.lru_cache(maxsize=4096)
def _check_indexed_stages(pipeline: PipelineIR, inputs: tuple[tuple[tuple[int, ...], torch.dtype], ...],
                          shape: tuple[int, ...]) -> None:
    """A stage before the first fold whose function reads ``index(axis)`` spans the iteration space ``shape``
    along that axis: where its arguments have size 1 there and a later input broadcasts the stream, torch's
    coordinate is 0 but the kernel's would run along the broadcast. ``inputs``: each input's shape and dtype."""
    at_fold, _ = combine_stage(pipeline)
    for at, stage in enumerate(pipeline.stages[:at_fold]):
        if not isinstance(stage, (Map, ZipWith)) or not index_axes(stage.fn):
            continue
        stream, joining = _entering(pipeline, inputs, at)
        args = torch.broadcast_shapes(*(t.shape for t in stream + [m for _, m in joining]))
        for axis in index_axes(stage.fn):
            size = args[axis] if -len(args) <= axis < len(args) else None
            full = shape[axis % len(args) + len(shape) - len(args)] if size is not None else None
            if size == 1 and full != 1:
                raise UnsupportedError(f"index({axis}) reads an axis along which this stage's arguments have size 1 "
                                       f"(shape {tuple(args)}) while a later input broadcasts the stream to "
                                       f"{shape}: torch's coordinate there is 0 for every element. Broadcast the "
                                       "stage's arguments first, or write 0", stage.location)


def _check_field_shapes(pipeline: PipelineIR, fields: tuple[Field, ...], stream: tuple[int, ...], stage,
                        attached: bool = False) -> None:
    """After a reduce, scan or attach every field has the stream's shape (a field that bypasses the combine, such
    as an input passed through unchanged, is not compiled yet)."""
    if stage is None and attached:
        for k, f in enumerate(fields):
            if k in pipeline.column_sums:
                if not f.dtype.is_floating_point:
                    raise UnsupportedError(f"result field {k} is summed over the rows (column_sums) but is "
                                           f"{str(f.dtype)[6:]}: only float fields are", pipeline.stages[-1].location)
                continue
            if f.shape != stream:
                raise UnsupportedError(f"result field {k} has shape {f.shape}, not the stream's {stream}: after an "
                                       "attach every result has the stream's shape. Compute a field of only a later "
                                       "input in a separate pipeline", pipeline.stages[-1].location)
        return
    if stage is None:
        if math.prod(stream) == 0 and any(math.prod(f.shape) for f in fields):
            raise UnsupportedError("the inputs broadcast to an empty shape, but a result field computed from only "
                                   "some of them is not empty; compute that field in a separate pipeline",
                                   pipeline.stages[-1].location)
        return
    for k, f in enumerate(fields):
        if f.shape != stream:
            raise UnsupportedError(f"result field {k} has shape {f.shape}, not the reduced/scanned stream's {stream}: "
                                   "after a reduce or scan every result must come from the combined stream. Return "
                                   "it from a separate pipeline", pipeline.stages[-1].location)


def _in_place_refused(pipeline: PipelineIR) -> str | None:
    """Why ``out=`` may not be an input of ``pipeline`` (None: it may). Each program writes the positions of the
    output it owns (a tile, a row, a segment of a long row) and reads an input holding the same elements only at
    those positions, each before its own store (a second sweep over a row, in an attach, again before the store),
    so a result may be written over its input; except where a position's result is stored at another position
    than the one read: an exclusive scan stores each tile's results one place along, over the next tile's first
    element before that tile is read, and a lag (a derived pipeline's) reads a place back."""
    for stage in pipeline.stages:
        if isinstance(stage, Scan) and stage.exclusive:
            return ("its exclusive scan stores each result one place along the axis from the element it reads, "
                    "over an element not yet read")
        if isinstance(stage, ZipWith) and stage.lags:
            return "it reads an input at another place along the scanned axis than the one it writes"
    return None


def check_out(out, fields: tuple[Field, ...], tensors: tuple, in_place: str | None = None) -> list[torch.Tensor]:
    """``out=`` must hold the result: a tensor of its shape, dtype and device (a tuple of them for a tuple
    result), sharing no memory with each other, and none with an input unless it is that input itself
    (:func:`same_elements`: the result written in place), where the pipeline allows it (``in_place`` says why
    not: :func:`_in_place_refused`). Returns the tensors, one per field."""
    if len(fields) > 1:
        if not isinstance(out, (tuple, list)) or len(out) != len(fields):
            raise ArgumentError(f"the result is a {len(fields)}-tuple of tensors, so out= must be a tuple of "
                               f"{len(fields)} tensors, got {type(out).__name__}")
        outs = list(out)
    else:
        outs = [out]
    for k, (o, f) in enumerate(zip(outs, fields)):
        _check_one_out(o, f, tensors, "out=" if len(fields) == 1 else f"out[{k}]", in_place)
    for j, k in ((j, k) for k in range(len(outs)) for j in range(k)):
        if overlap(outs[j], outs[k]):
            raise AliasError(f"two tensors of out= share memory (out[{j}] and out[{k}]); pass a separate tensor "
                             "for each result")
    return outs


def byte_range(t: torch.Tensor) -> tuple[int, int]:
    """The addresses from ``t``'s lowest element to one past its highest, in bytes (``t`` holds elements, and
    its memory is readable: :func:`unreadable_kind`). Computed from the data pointer, sizes and strides, so two
    storages over one buffer (``torch.frombuffer`` twice, a slice of an ``UntypedStorage``) are compared by the
    memory itself."""
    low = sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if st < 0)
    high = sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if st > 0)
    start, size = t.data_ptr(), t.element_size()
    return start + low * size, start + (high + 1) * size


def overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the address ranges of ``a`` and ``b`` (:func:`byte_range`) meet; a tensor of no elements occupies
    nothing. Views that interleave without sharing an element (``x[:, 0]`` and ``x[:, 1]``) count as meeting."""
    if not (a.numel() and b.numel()):
        return False
    (a0, a1), (b0, b1) = byte_range(a), byte_range(b)
    return a0 < b1 and b0 < a1


def same_elements(out: torch.Tensor, t: torch.Tensor) -> bool:
    """Whether the input ``t``, broadcast to ``out``'s shape, is ``out`` itself: every element of ``out`` is the
    element of ``t`` at its own position (same address, element size and strides along every axis longer than
    one), so a kernel that reads an element and then writes its result there writes in place."""
    if out.data_ptr() != t.data_ptr() or out.element_size() != t.element_size():
        return False
    try:
        view = t.expand(out.shape)
    except RuntimeError:
        return False
    return all(a == b for n, a, b in zip(out.shape, view.stride(), out.stride()) if n > 1)


def _check_one_out(out, field: Field, tensors: tuple, name: str, in_place: str | None = None) -> None:
    shape, dtype = field.shape, field.dtype
    if not isinstance(out, torch.Tensor):
        raise ArgumentError(f"{name} must be a torch.Tensor, got {type(out).__name__}")
    unreadable = unreadable_kind(out)
    if unreadable is not None or out.is_neg() or out.is_conj():
        what = f"is {unreadable[0]}" if unreadable is not None else \
            "carries a lazy negation or conjugation bit, which tricomb's plain stores would not honour"
        raise DTypeError(f"{name} {what}; pass a plain dense tensor (torch.empty({shape}, dtype={dtype}))")
    if tuple(out.shape) != shape:
        raise ShapeError(f"{name} has shape {tuple(out.shape)} but the result has shape {shape}; allocate it with "
                         f"torch.empty({shape}, dtype={dtype})")
    if out.dtype != dtype:
        raise DTypeError(f"{name} has dtype {out.dtype} but the result's dtype is {dtype}; allocate it with "
                         f"dtype={dtype}")
    if out.requires_grad and torch.is_grad_enabled():
        raise DTypeError(f"{name} requires grad; tricomb writes it without recording autograd. Pass a tensor that "
                         "does not require grad")
    if out.device != tensors[0].device:
        raise DeviceError(f"{name} is on {out.device} but the inputs are on {tensors[0].device}; allocate it there")
    exact = [i for i, t in enumerate(tensors) if overlap(out, t) and same_elements(out, t)]
    if exact and in_place is not None:
        raise AliasError(f"{name} is input {exact[0]} itself, but this pipeline cannot write its result in place: "
                         f"{in_place}. Pass a tensor of its own memory")
    shared = [i for i, t in enumerate(tensors) if overlap(out, t) and i not in exact]
    if shared:
        raise AliasError(f"{name} and input {shared[0]} span overlapping memory but are not the same elements "
                         "(tricomb compares the span from each tensor's first to its last element, so views that "
                         "interleave without sharing an element count too); a result is written in place only over "
                         "an input it is exactly (same memory, shape and strides, as out=x for the input x). Pass "
                         "that input itself, or a tensor of its own memory")
    if any(s == 0 and n > 1 for n, s in zip(out.shape, out.stride())):
        raise ShapeError(f"{name} has a zero stride (an expanded tensor), so elements would overwrite each other; "
                         "pass a tensor that owns one slot per element")
