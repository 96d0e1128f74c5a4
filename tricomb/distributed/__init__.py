"""Pipelines over tensors sharded across processes (torch.distributed): each rank runs its fused kernels on its
own shard, and each fold along the sharded axis costs one gather of small states (:mod:`.run`, :mod:`.rules`).

Two ways in:

* DTensors: ``pipe(x)`` where ``x`` is a ``torch.distributed.tensor.DTensor`` on a one-dimensional device mesh,
  placed ``Shard(d)`` or ``Replicate()``; the result is a DTensor, ``Shard`` along the same axis where the
  result keeps it (a scan, a map, an attach), ``Replicate()`` where a reduce removed it;
* local shards: :func:`call`, for code that shards with plain process groups.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .. import api
from ..api import is_dtensor
from ..errors import ArgumentError, UnsupportedError, caller_location
from ..pipeline.ir import Attach, new_inputs
from ..runtime.lru import LRU
from .run import Sharding, Walk, check_sizes, shard_sizes, signature

__all__ = ["call", "Sharding"]


_ONE_PASS = LRU(256)  # (pipeline, input signature) -> its stages: binding costs milliseconds a call


def _stages(pipe, local: list) -> tuple:
    """The pipeline's stages, a two-pass softmax chain in its one-pass form (:func:`tricomb.lower.derive.one_pass`):
    one attach, so one gather of the rows' (maximum, rescaled sum) instead of two."""
    from ..lower.bind import bind
    from ..lower.derive import one_pass
    if not any(isinstance(s, Attach) for s in pipe.ir.stages):
        return pipe.ir.stages
    key = (pipe.ir, signature(local))
    found = _ONE_PASS.get(key)
    if found is None:
        tensors = tuple(t for t in local if isinstance(t, torch.Tensor))
        derived = one_pass(pipe.ir, bind(pipe.ir, tensors, None)[0]) if len(tensors) == len(local) else None
        found = _ONE_PASS[key] = (derived or pipe.ir).stages
    return found


def _stream_rank(pipe, inputs, where) -> int:
    """The rank of the stream the sharded axis is counted in: the first stage's inputs'. Raises UnsupportedError
    for a later input of more dimensions (it would grow the stream after the axis was placed)."""
    first = inputs[:new_inputs(pipe.ir.stages)[0]]
    rank = max((t.dim() for t in first if isinstance(t, torch.Tensor)), default=0)
    if any(isinstance(t, torch.Tensor) and t.dim() > rank for t in inputs):
        raise UnsupportedError(f"an input joining later has more dimensions than the first stage's inputs ({rank}); "
                               "over sharded tensors the stream's rank is fixed at the start: give the first inputs "
                               "every dimension (x[None] or x.expand(...)) first", where)
    return rank


def _length(inputs, axis: int, rank: int) -> tuple[int, str | None]:
    """The shard's length along ``axis`` (the inputs that reach it, broadcast: size 1 there, or the shard's
    length), and what is wrong when those lengths disagree."""
    lengths = {t.shape[axis - (rank - t.dim())] for t in inputs
               if isinstance(t, torch.Tensor) and 0 <= axis - (rank - t.dim())} - {1}
    if len(lengths) > 1:
        return 0, (f"the inputs hold {sorted(lengths)} elements along the sharded axis {axis}: each input there is "
                   "this rank's shard (one length) or broadcast (size 1); slice a full-length input to the shard")
    return (lengths.pop() if lengths else 1 if any(isinstance(t, torch.Tensor) for t in inputs) else 0), None


def _axis(axis, rank: int, where) -> int:
    if type(axis) is not int or not -rank <= axis < max(rank, 1):
        raise ArgumentError(f"axis={axis!r} is no axis of the pipeline's stream, of {rank} dimension(s): give the "
                            f"axis the inputs are sharded along, an int from {-rank} to {rank - 1}", where)
    return axis % rank


def call(pipe, *inputs, axis: int = -1, group=None, sizes=None, **named):
    """``pipe`` on this rank's shards of inputs split along ``axis`` of the pipeline's stream across the ranks of
    ``group`` (the default group when None), in rank order; every rank calls it with its own shards.

    Inputs that do not reach ``axis`` (fewer dimensions) or have size 1 there are broadcast, the same on every
    rank. ``sizes``: every rank's length along ``axis``, in rank order; left out, they are gathered (one small
    all_gather). Ranks may hold different lengths, 0 included.

    Returns this rank's part of the result: where the result keeps ``axis`` (maps, scans, attaches), the part
    for this shard; where a reduce removed it, the whole result, the same on every rank. Positions along the
    axis (``tc.index``, argmax, cummax's indices) are those of the whole tensor. Each reduce, scan or attach
    along the axis costs one collective of its states (an all_reduce for a sum, else an all_gather; NCCL on
    GPUs, gloo on the CPU), differentiable when they need gradients. Raises ArgumentError for an axis, sizes or group that do not fit,
    UnsupportedError for a fold with no sharded form (nanmean; argmax over several axes)."""
    where = caller_location()
    if not dist.is_available() or not dist.is_initialized():
        raise ArgumentError("tricomb.distributed.call needs torch.distributed initialized: call "
                            "torch.distributed.init_process_group (backend 'nccl' on GPUs, 'gloo' on the CPU) in each "
                            "process first", where)
    if "out" in named:
        raise UnsupportedError("out= is not taken over sharded tensors: the result is this rank's new tensor; copy "
                               "it into your buffer after the call", where)
    rank = _stream_rank(pipe, inputs, where)
    axis = _axis(axis, rank, where)
    length, problem = _length(inputs, axis, rank)
    index, world = dist.get_rank(group), dist.get_world_size(group)
    device = next((t.device for t in inputs if isinstance(t, torch.Tensor)), torch.device("cpu"))
    if sizes is None:
        sizes = shard_sizes(length, problem, group, device)
    elif problem is not None:
        raise ArgumentError(problem, where)
    else:
        sizes = check_sizes(sizes, world, length, index)
    stages = _stages(pipe, list(inputs))
    result, _ = Walk(stages, inputs, pipe.parameters, named, Sharding(axis, rank, index, sizes, group)).run()
    return result if len(result) > 1 else result[0]


def call_dtensors(pipe, inputs, named):
    """``pipe`` on inputs some of which are DTensors (module docstring): the result as DTensors."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    where = caller_location()
    meshes = {x.device_mesh for x in inputs if is_dtensor(x)}
    if len(meshes) != 1 or next(iter(meshes)).ndim != 1:
        raise UnsupportedError("tricomb pipelines take DTensors on one device mesh of one dimension; redistribute "
                               "them onto one 1-D mesh first", where)
    mesh = next(iter(meshes))
    rank = _stream_rank(pipe, inputs, where)
    axes = {x.placements[0].dim % x.dim() + rank - x.dim() for x in inputs
            if is_dtensor(x) and isinstance(x.placements[0], Shard)}
    if len(axes) > 1:
        raise UnsupportedError(f"the DTensors are sharded along different axes of the stream ({sorted(axes)}); "
                               "tricomb combines along one sharded axis: redistribute them onto one", where)
    if not axes:
        local = [x.to_local() if is_dtensor(x) else x for x in _replicated(inputs, mesh)]
        result = pipe(*local, **named)
        fields = result if isinstance(result, tuple) else (result,)
        wrapped = tuple(DTensor.from_local(t, mesh, [Replicate()], run_check=False) for t in fields)
        return wrapped if len(wrapped) > 1 else wrapped[0]
    axis = axes.pop()
    total = next(x.shape[x.dim() - rank + axis] for x in inputs
                 if is_dtensor(x) and isinstance(x.placements[0], Shard))
    world, index = mesh.size(), mesh.get_local_rank()
    sizes = _chunk_sizes(total, world)
    sharding = Sharding(axis, rank, index, sizes, mesh.get_group())
    local = [_local(x, sharding) for x in _replicated(inputs, mesh)]
    result, (_, kept) = Walk(_stages(pipe, local), local, pipe.parameters, named, sharding).run()
    wrapped = tuple(_wrapped(t, mesh, kept, total) for t in result)
    return wrapped if len(wrapped) > 1 else wrapped[0]


def _replicated(inputs, mesh) -> list:
    """The inputs with every ``Partial`` DTensor made ``Replicate`` (its sum, as DTensor's own ops take it)."""
    from torch.distributed.tensor import Replicate, Shard
    return [x.redistribute(mesh, [Replicate()]) if is_dtensor(x) and not isinstance(x.placements[0], (Shard,
            Replicate)) else x for x in inputs]


def _local(x, sharding: Sharding):
    """The part of input ``x`` this rank computes with: a shard's own tensor; of a replicated input (a DTensor
    ``Replicate`` or a plain tensor) its part along the sharded axis, unless it broadcasts there. A replicated
    input's gradient is then this rank's share: ``Partial()``, as DTensor's own ops give it."""
    from torch.distributed.tensor import Partial, Shard
    if is_dtensor(x) and isinstance(x.placements[0], Shard):
        return x.to_local()
    if is_dtensor(x):
        x = x.to_local(grad_placements=[Partial()])
    at = sharding.axis - (sharding.rank - x.dim()) if isinstance(x, torch.Tensor) else -1
    if at < 0 or x.shape[at] == 1:
        return x
    if x.shape[at] != sharding.total:
        raise ArgumentError(f"an input holds {x.shape[at]} elements along the sharded axis, of {sharding.total}: give "
                            "the whole axis (sliced to each rank's part here), or size 1 to broadcast", None)
    return x.narrow(at, sharding.offset, sharding.sizes[sharding.index])


def _chunk_sizes(total: int, world: int) -> tuple[int, ...]:
    """The lengths DTensor's ``Shard`` gives each rank: ``torch.chunk``'s, the last ranks' possibly empty."""
    full = -(-total // world) if world else 0
    return tuple(max(0, min(full, total - r * full)) for r in range(world))


def _wrapped(t: torch.Tensor, mesh, axis: int | None, total: int):
    from torch.distributed.tensor import DTensor, Replicate, Shard

    if axis is None:
        return DTensor.from_local(t, mesh, [Replicate()], run_check=False)
    shape = t.shape[:axis] + (total,) + t.shape[axis + 1:]
    stride = tuple(torch.empty(shape, device="meta").stride())
    return DTensor.from_local(t, mesh, [Shard(axis)], run_check=False, shape=torch.Size(shape), stride=stride)


api.DTENSOR_CALLS[:] = [call_dtensors]
