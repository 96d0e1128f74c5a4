"""Binding a pipeline to its input tensors: checks, shapes, and the layout the kernel iterates over.

The kernel walks an *iteration space*: the broadcast shape of the inputs that join before the reduce or scan.
Each dimension is ``kept`` (it indexes the output) or ``reduced`` (combined by the reduce or scan). Every
tensor the kernel touches gets a stride for each dimension (0 where it broadcasts), and neighbouring dimensions
of the same kind merge into one :class:`Group` when every tensor's strides allow it, as TensorIterator does.
A contiguous input therefore becomes one group and a flat index; a transposed or sliced one keeps more.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ..errors import ArityError, DeviceError, DTypeError, ShapeError, TricombError
from ..pipeline.evaluate import evaluate
from ..pipeline.ir import PipelineIR, Reduce, Scan, ZipWith
from ..pipeline.verify import iteration_axes

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
    joins_after: tuple[bool, ...]  # per input: joins after the reduce/scan
    rank: int  # rank of the iteration space
    axes: tuple[int, ...]  # reduced or scanned dimensions of the iteration space
    groups: tuple[Group, ...]
    out_dtype: torch.dtype
    default_dtype: torch.dtype  # torch.get_default_dtype(): the dtype of Python floats meeting integers


def combine_stage(pipeline: PipelineIR) -> tuple[int, Reduce | Scan | None]:
    """The index and stage of the pipeline's reduce or scan (``(len, None)`` when there is none)."""
    for i, stage in enumerate(pipeline.stages):
        if isinstance(stage, (Reduce, Scan)):
            return i, stage
    return len(pipeline.stages), None


def input_stages(pipeline: PipelineIR) -> list[int]:
    """For each pipeline input, the index of the stage that brings it in."""
    owners: list[int] = []
    for i, stage in enumerate(pipeline.stages):
        if isinstance(stage, ZipWith):
            owners += [i] * (stage.fn.arity if i == 0 else stage.fn.arity - 1)
        elif i == 0:
            owners.append(0)
    return owners


def _check_tensors(pipeline: PipelineIR, tensors: tuple) -> None:
    expected = pipeline.num_inputs
    if len(tensors) != expected:
        raise ArityError(f"the pipeline takes {expected} input tensor(s) but was called with {len(tensors)}; "
                           "pass one tensor per input (zip_with adds inputs)")
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise DTypeError(f"input {i} is a {type(t).__name__}, not a torch.Tensor; wrap it with "
                             "torch.as_tensor(...)")
        if t.layout != torch.strided or t.is_neg() or t.is_conj():
            raise DTypeError(f"input {i} is a {t.layout} tensor{' with a lazy negation or conjugation' if t.layout == torch.strided else ''}; "
                             "pass a plain dense tensor (.to_dense(), .resolve_neg(), .resolve_conj())")
        if t.dtype not in SUPPORTED_DTYPES:
            names = ", ".join(str(d).replace("torch.", "") for d in SUPPORTED_DTYPES)
            raise DTypeError(f"input {i} has dtype {str(t.dtype).replace('torch.', '')}; this version handles "
                             f"{names}. Convert it with .to(torch.float32)")
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise TricombError("an input requires grad, but tricomb kernels record no autograd graph; pass "
                           "x.detach(), or call the pipeline under torch.no_grad()")
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        listed = ", ".join(f"input {i} on {t.device}" for i, t in enumerate(tensors))
        raise DeviceError(f"inputs are on different devices ({listed}); move them to one device with .to(device)")
    device = tensors[0].device
    if device.type not in ("cuda", "cpu"):
        raise DeviceError(f"inputs are on {device}; tricomb runs on CUDA devices, and on the CPU through "
                          "Triton's interpreter")


def _broadcast(shapes: list[torch.Size], what: str, location) -> torch.Size:
    try:
        return torch.broadcast_shapes(*shapes)
    except RuntimeError:
        listed = " and ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(f"{what}: shapes {listed} do not broadcast together (torch's rules: trailing dimensions "
                         "must be equal or 1); reshape or expand the inputs", location) from None


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


def coalesce(shape: tuple[int, ...], axes: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[Group, ...]:
    """Merge neighbouring dimensions of one kind whose strides make them one run in every tensor.

    Size-1 dimensions are dropped: their index is always 0.
    """
    groups: list[tuple[str, list[int], int]] = []  # kind, dims (inner first), size so far
    for d in reversed(range(len(shape))):
        if shape[d] == 1:
            continue
        kind = "reduced" if d in axes else "kept"
        if groups:
            g_kind, g_dims, g_size = groups[-1]
            inner = g_dims[0]
            if g_kind == kind and all(s[d] == s[inner] * g_size for s in strides):
                g_dims.append(d)
                groups[-1] = (g_kind, g_dims, g_size * shape[d])
                continue
        groups.append((kind, [d], shape[d]))
    return tuple(Group(kind, tuple(reversed(dims))) for kind, dims, _ in reversed(groups))


@functools.lru_cache(maxsize=4096)
def result_dtype(pipeline: PipelineIR, inputs: tuple[tuple[tuple[int, ...], torch.dtype], ...],
                 default: torch.dtype) -> torch.dtype:
    """torch's result dtype for ``pipeline`` on inputs of these shapes and dtypes (evaluated on meta tensors);
    ``default`` is torch's default dtype, which decides the dtype of Python floats meeting integers."""
    return evaluate(pipeline, [torch.empty(shape, dtype=dtype, device="meta") for shape, dtype in inputs],
                    explain_errors=True).dtype


def bind(pipeline: PipelineIR, tensors: tuple, out: torch.Tensor | None = None) -> tuple[Binding, tuple[int, ...]]:
    """Check ``tensors`` (and ``out``) against ``pipeline``; return their layout class and the result's shape.

    Raises :class:`TricombError` subclasses for a wrong number of inputs, non-tensors, unsupported dtypes,
    mixed devices, shapes that do not broadcast, axes out of range, and an ``out`` that does not fit.
    """
    _check_tensors(pipeline, tensors)
    at, stage = combine_stage(pipeline)
    owners = input_stages(pipeline)
    after = tuple(owner > at for owner in owners)
    before = [t.shape for t, a in zip(tensors, after) if not a]
    shape = tuple(_broadcast(before, "the inputs of the pipeline", None))
    axes = iteration_axes(stage, len(shape))
    reduced = out_shape(torch.Size(shape), stage, axes)
    for t, a, owner in zip(tensors, after, owners):
        if a and tuple(_broadcast([reduced, t.shape], "an input added after the reduce/scan",
                                  pipeline.stages[owner].location)) != reduced:
            raise ShapeError(f"an input of shape {tuple(t.shape)} joins a stream of shape {reduced} after the "
                             "reduce/scan and would grow it; inputs added there must broadcast to the stream's "
                             "shape", pipeline.stages[owner].location)
    dtype = result_dtype(pipeline, tuple((tuple(t.shape), t.dtype) for t in tensors), torch.get_default_dtype())
    if out is not None:
        check_out(out, reduced, dtype, tensors)
    strides = [iteration_strides(t, shape, a, stage, axes) for t, a in zip(tensors, after)]
    out_like = out if out is not None else torch.empty(reduced, dtype=dtype, device="meta")
    strides.append(iteration_strides(out_like, shape, True, stage, axes))
    binding = Binding(tensors[0].device.type, tuple(t.dtype for t in tensors), tuple(t.dim() for t in tensors),
                      after, len(shape), axes, coalesce(shape, axes, strides), dtype, torch.get_default_dtype())
    return binding, reduced


def check_out(out, shape: tuple[int, ...], dtype: torch.dtype, tensors: tuple) -> None:
    """``out=`` must be a tensor of the result's shape, dtype and device, sharing no memory with an input."""
    if not isinstance(out, torch.Tensor):
        raise TricombError(f"out= must be a torch.Tensor, got {type(out).__name__}")
    if tuple(out.shape) != shape:
        raise ShapeError(f"out= has shape {tuple(out.shape)} but the result has shape {shape}; allocate it with "
                         f"torch.empty({shape}, dtype={dtype})")
    if out.dtype != dtype:
        raise DTypeError(f"out= has dtype {out.dtype} but the result's dtype is {dtype}; allocate it with "
                         f"dtype={dtype}")
    if out.requires_grad and torch.is_grad_enabled():
        raise DTypeError("out= requires grad; tricomb writes it without recording autograd. Pass a tensor that "
                         "does not require grad")
    if out.device != tensors[0].device:
        raise DeviceError(f"out= is on {out.device} but the inputs are on {tensors[0].device}; allocate it there")
    if out.numel() and any(t.numel() and t.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
                           for t in tensors):
        raise TricombError("out= shares memory with an input; results never alias inputs. Pass a fresh tensor")
    if any(s == 0 and n > 1 for n, s in zip(out.shape, out.stride())):
        raise ShapeError("out= has a zero stride (an expanded tensor), so elements would overwrite each other; "
                         "pass a tensor that owns one slot per element")
