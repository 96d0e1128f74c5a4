"""A pipeline over inputs sharded along one axis of its stream: each rank's fused kernels, one gather per fold.

The stages are walked in order. Stages that do not combine along the sharded axis run in the shard's kernel as
they are (positions along the axis read as global ones). At the first fold along it (:mod:`.rules`):

* a reduce: each rank's kernel computes its state, the states are gathered, and one kernel combines them in
  rank order and runs every later stage (the axis is gone, or of size 1: the rest is the same on every rank);
* an attach: the same for the attached pipeline's reduce; the combined fields are new inputs of a zip_with that
  appends them to the stream, and the walk goes on;
* a scan: each rank's kernel computes its shard's total, the totals are gathered, a kernel combines the totals
  of the ranks before this one (after it, reversed) into a seed, and the scan is seeded in the shard's own
  kernel (a zip_with after it); the walk goes on.

When no fold along the axis is left, one kernel runs the stages on the shard. A sum's states are added by one
``torch.distributed.all_reduce`` instead of gathered (:func:`.rules.summed`). The gathers are one
``torch.distributed.all_gather`` of every state field's bytes (the backend's: NCCL on GPUs, gloo on the CPU),
with a backward when a state needs gradients (:class:`_Gathered`): a reduce's or an attach's
combine whose result is replicated is the same on every rank, so a state's gradient is its own rank's; a scan's
seeds and an attach's fields are read by each rank for its own shard, so their states' gradients are summed over
the ranks (one all_reduce).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..api import Pipeline
from ..errors import ArgumentError
from ..pipeline.evaluate import evaluate_fields
from ..pipeline.ir import Attach, PipelineIR, Reduce, Scan, Stage, ZipWith, new_inputs, stream_widths
from . import rules


@dataclass(frozen=True)
class Sharding:
    """How the inputs are sharded: along ``axis`` of the stream (non-negative, of ``rank`` dimensions), this
    process being ``index`` of the group's ranks, which hold ``sizes`` elements along it in rank order."""

    axis: int
    rank: int
    index: int
    sizes: tuple[int, ...]
    group: object = None

    @property
    def offset(self) -> int:
        return sum(self.sizes[:self.index])

    @property
    def total(self) -> int:
        return sum(self.sizes)


@functools.lru_cache(maxsize=256)
def _pipeline(ir: PipelineIR, parameters: tuple) -> Pipeline:
    """The pipeline of ``ir``, kept: a call's kernels are the same pipelines each time (its shard's offset is in
    their functions)."""
    return Pipeline(ir, parameters)


def _call(stages, inputs, parameters, named, sharding: Sharding | None):
    """One kernel: ``stages`` on ``inputs``, positions along the sharded axis global when ``sharding``."""
    if sharding is not None:
        stages = rules.localized(tuple(stages), sharding.rank, sharding.axis, sharding.offset)
    result = _pipeline(PipelineIR(tuple(stages)), parameters)(*inputs, **named)
    return result if isinstance(result, tuple) else (result,)


def places(stages, rank: int, axis: int | None) -> list[tuple[int, int | None]]:
    """The stream's rank and the sharded axis's place before each stage, and after the last."""
    out = [(rank, axis)]
    for stage in stages:
        out.append(rules.after(stage, *out[-1]))
    return out


def _first_fold(stages, start: int, sharding: Sharding) -> int | None:
    for at, (rank, axis) in enumerate(places(stages, sharding.rank, sharding.axis)[:len(stages)]):
        if at >= start and axis is not None and rules.folds_along(stages[at], axis, rank):
            return at
    return None


def _consumed(stages, upto: int) -> int:
    """How many inputs ``stages[:upto]`` take."""
    return sum(new_inputs(tuple(stages))[:upto])


def _count(stage: Reduce, shape: tuple[int, ...], sharding: Sharding, rank: int, axis: int) -> int:
    """How many elements ``stage`` combines over the whole (unsharded) stream."""
    return math.prod(sharding.total if a == axis else shape[a] for a in rules.reduced_axes(stage, rank))


def _stand_ins(inputs, sharding: Sharding) -> list:
    """An empty shard's inputs with one element along the axis: its kernel runs for the states' shapes and
    dtypes, which the combine then leaves out (an operator without an identity has no value for no elements).
    The broadcast inputs are detached: the stand-in's made-up element must send them no gradient (0 * inf)."""
    out = []
    for t in inputs:
        at = sharding.axis - (sharding.rank - t.dim()) if isinstance(t, torch.Tensor) else -1
        if 0 <= at < t.dim() and t.shape[at] == 0:
            # joined to the empty shard, so that a backward asked for the shard's gradient reaches the gathers (each
            # a collective every rank's backward must run)
            t = torch.cat([t, t.new_zeros(t.shape[:at] + (1,) + t.shape[at + 1:])], dim=at)
        elif isinstance(t, torch.Tensor):
            t = t.detach()
        out.append(t)
    return out


class _Gathered(torch.autograd.Function):
    """One state field of every rank, stacked in rank order, with its gradient. ``shared``: every rank reads the
    stack alike (a combine whose result is replicated), so each rank's state gets its own slot's gradient, the
    same on every rank; otherwise each rank reads it for its own shard (a scan's seed), and a state's gradient is
    the sum of every rank's (one all_reduce)."""

    @staticmethod
    def forward(ctx, field: torch.Tensor, shared: bool, index: int, group):
        ctx.shared, ctx.index, ctx.group = shared, index, group
        parts = [torch.empty_like(field) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, field.contiguous(), group=group)
        return torch.stack(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        if not ctx.shared:
            grad = grad.contiguous()
            dist.all_reduce(grad, group=ctx.group)
        return grad[ctx.index], None, None, None


def _gather(fields: tuple, sharding: Sharding, shared: bool) -> list[torch.Tensor]:
    """Each state field of every rank, stacked along a new leading axis in rank order, the empty shards' left
    out; ``shared``: whether every rank reads the stacks alike (see :class:`_Gathered`)."""
    world = len(sharding.sizes)
    if torch.is_grad_enabled() and any(f.requires_grad for f in fields):
        stacks = [_Gathered.apply(f, shared, sharding.index, sharding.group) for f in fields]
    else:
        stacks = _gather_packed(fields, world, sharding.group)
    keep = [r for r, n in enumerate(sharding.sizes) if n]
    if len(keep) == world:
        return stacks
    index = torch.tensor(keep, dtype=torch.int64, device=stacks[0].device)
    return [s.index_select(0, index) for s in stacks]


def _padded_bytes(f: torch.Tensor) -> torch.Tensor:
    """``f``'s bytes, padded to a multiple of 8 so that every field after it starts aligned for its dtype."""
    bytes_ = f.contiguous().reshape(-1).view(torch.uint8)
    pad = -bytes_.numel() % 8
    return torch.cat([bytes_, bytes_.new_zeros(pad)]) if pad else bytes_


def _gather_packed(fields: tuple, world: int, group) -> list[torch.Tensor]:
    """One all_gather of every field's bytes, unpacked into one stack per field."""
    flat = [_padded_bytes(f) for f in fields]
    packed = torch.cat(flat) if len(flat) > 1 else flat[0]
    parts = [torch.empty_like(packed) for _ in range(world)]
    dist.all_gather(parts, packed, group=group)
    stacks, start = [], 0
    for f, bytes_ in zip(fields, flat):
        n = bytes_.numel()
        size = f.numel() * f.element_size()
        rows = [p[start:start + size].view(f.dtype).reshape(f.shape) for p in parts]
        stacks.append(torch.stack(rows))
        start += n
    return stacks


def _combine_stages(k: int, combine: Reduce, then) -> tuple[Stage, ...]:
    """The stages combining ``k`` stacked state fields along the ranks' axis, then ``then``."""
    head = (ZipWith(rules.stacked(k)),) if k > 1 else ()
    return head + (combine,) + tuple(then)


def _stream_shape(stages, inputs, at: int, rank: int) -> tuple[int, ...]:
    """The shape of the stream entering stage ``at``: the first stage's inputs broadcast, each later zip_with's
    new inputs broadcast in, each reduce applied."""
    counts = new_inputs(tuple(stages))
    shape: tuple[int, ...] = ()
    taken = 0
    for i, stage in enumerate(stages[:at + 1]):
        joining = [t.shape for t in inputs[taken:taken + counts[i]] if isinstance(t, torch.Tensor)]
        taken += counts[i]
        shape = tuple(torch.broadcast_shapes(shape, *joining))
        if i == at:
            break
        if isinstance(stage, Reduce):
            axes = rules.reduced_axes(stage, len(shape))
            shape = tuple(1 if j in axes else n for j, n in enumerate(shape) if stage.keepdim or j not in axes)
    return (1,) * (rank - len(shape)) + shape


class _Tie(torch.autograd.Function):
    """The results, unchanged, made to depend on the gathered states: every rank's backward then runs each
    gather's backward (a collective) once, in the same order, though a rank's results may not read every state
    (the first rank's scan reads no seed)."""

    @staticmethod
    def forward(ctx, count: int, *tensors):
        ctx.shapes = [(t.shape, t.dtype, t.device) for t in tensors[count:]]
        return tuple(t.view_as(t) for t in tensors[:count])

    @staticmethod
    def backward(ctx, *grads):
        zeros = [torch.zeros(shape, dtype=dtype, device=device) for shape, dtype, device in ctx.shapes]
        return (None, *grads, *zeros)


class _Summed(torch.autograd.Function):
    """A sum's state added over every rank (one all_reduce), with its gradient: ``shared`` (a result the same on
    every rank) passes each rank's gradient through; otherwise (read by each rank for its own shard) the ranks'
    gradients are summed, as :class:`_Gathered`'s."""

    @staticmethod
    def forward(ctx, state: torch.Tensor, shared: bool, group):
        ctx.shared, ctx.group = shared, group
        total = state.contiguous().clone()
        dist.all_reduce(total, group=group)
        return total

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        if not ctx.shared:
            grad = grad.contiguous().clone()
            dist.all_reduce(grad, group=ctx.group)
        return grad, None, None


def _tied(result: tuple, others: list) -> tuple:
    """``result`` made to depend on ``others`` with a zero gradient to them (:class:`_Tie`)."""
    if not others or not torch.is_grad_enabled():
        return tuple(result)
    return _Tie.apply(len(result), *result, *others)


class Walk:
    """One call's walk over the stages (module docstring): ``stages`` and ``inputs`` as rewritten so far."""

    def __init__(self, stages, inputs, parameters, named, sharding: Sharding):
        self.stages, self.inputs = list(stages), list(inputs)
        self.parameters, self.named, self.sharding = parameters, named, sharding
        self.gathered: list[torch.Tensor] = []  # the states gathered with gradients (see _Tie)

    def run(self):
        """The result fields, and the stream's rank and the sharded axis's place after the last stage."""
        dtypes = _dtypes(self.stages, self.inputs)  # (the unsharded pipeline's: half sums' states are float32)
        start = 0
        while True:
            at = _first_fold(self.stages, start, self.sharding)
            if at is None:
                result = self._local(self.stages, self.inputs)
                place = places(self.stages, self.sharding.rank, self.sharding.axis)[-1]
                break
            stage = self.stages[at]
            if isinstance(stage, Reduce):
                result, place = self._reduce(at, stage), (None, None)
                break
            start = self._scan(at, stage) if isinstance(stage, Scan) else self._attach(at, stage)
        if dtypes is not None:
            result = tuple(r if r.dtype == d else r.to(d) for r, d in zip(result, dtypes))
        return _tied(result, self.gathered), place

    def _local(self, stages, inputs):
        return _call(stages, inputs, self.parameters, self.named, self.sharding)

    def _shard_states(self, stages, inputs) -> tuple:
        """The states ``stages`` compute on the shard; on an empty shard, on its stand-ins (:func:`_stand_ins`),
        joined to the broadcast inputs with a zero gradient (this rank holds no element of their gradient)."""
        if self.sharding.sizes[self.sharding.index]:
            return _call(stages, inputs, self.parameters, self.named, self.sharding)
        fields = _call(stages, _stand_ins(inputs, self.sharding), self.parameters, self.named, self.sharding)
        wanting = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
        return _tied(fields, wanting)

    def _states(self, stages, inputs, shared: bool) -> list[torch.Tensor]:
        """The states ``stages`` compute on the shard, gathered (``shared``: see :class:`_Gathered`)."""
        fields = self._shard_states(stages, inputs)
        stacks = _gather(fields, self.sharding, shared)
        if not shared:
            self.gathered += [s for s in stacks if s.requires_grad]
        return stacks

    def _place(self, at: int) -> tuple[int, int]:
        return places(self.stages, self.sharding.rank, self.sharding.axis)[at]

    def _reduce(self, at: int, stage: Reduce):
        rank, axis = self._place(at)
        shape = _stream_shape(self.stages, self.inputs, at, self.sharding.rank)
        split = rules.split_reduce(stage, axis, _count(stage, shape, self.sharding, rank, axis), rank)
        n = _consumed(self.stages, at + 1)
        local = self.stages[:at] + list(split.state)
        then = list(split.finish) + self.stages[at + 1:]
        return self._combined(local, self.inputs[:n], split, then, self.inputs[n:], shared=True)

    def _combined(self, local, inputs, split: rules.Split, then, extra, shared: bool) -> tuple:
        """The fold's result over every rank (its ``local`` stages on the shard, then one collective and the
        combine), then the stages ``then``, which take ``extra`` inputs. A sum's states are added by one
        all_reduce; every other fold's are gathered and combined in rank order."""
        if not rules.summed(split.combine):
            states = self._states(local, inputs, shared)
            return _call(_combine_stages(len(states), split.combine, then), states + list(extra), self.parameters,
                         self.named, None)
        empty = self.sharding.sizes[self.sharding.index] == 0
        local = _float32_sum(local, inputs)
        (state,) = self._shard_states(local, inputs)
        if empty:  # the sum's identity, still joined to the shard for a backward that must reach the all_reduce
            state = torch.where(torch.zeros_like(state, dtype=torch.bool), state, torch.zeros_like(state))
        total = _Summed.apply(state, shared, self.sharding.group)
        if not shared and total.requires_grad:
            self.gathered.append(total)
        if not then:
            return (total,)
        return _call(tuple(then), [total, *extra], self.parameters, self.named, None)

    def _scan(self, at: int, stage: Scan) -> int:
        rank, axis = self._place(at)
        parts = rules.split_scan(stage, axis)
        n = _consumed(self.stages, at + 1)
        totals = self._states(self.stages[:at] + list(parts.total), self.inputs[:n], shared=False)
        seed = self._seed(totals, parts, stage.reverse)
        seeding = [ZipWith(rules.seeded(parts.op))] if seed else []
        self.stages[at:at + 1] = list(parts.local) + seeding
        self.inputs[n:n] = seed
        return at + len(parts.local) + len(seeding)

    def _seed(self, totals: list[torch.Tensor], parts: rules.ScanParts, reverse: bool) -> list[torch.Tensor]:
        """The combined totals of the non-empty ranks before this one (after it, reversed), or none."""
        sizes, me = self.sharding.sizes, self.sharding.index
        kept = [r for r, n in enumerate(sizes) if n]
        chosen = [i for i, r in enumerate(kept) if (r > me if reverse else r < me)]
        if not chosen:
            return []
        index = torch.tensor(chosen, dtype=torch.int64, device=totals[0].device)
        picked = [t.index_select(0, index) for t in totals]
        return list(_call(_combine_stages(len(picked), parts.prefix, ()), picked, self.parameters, self.named, None))

    def _attach(self, at: int, stage: Attach) -> int:
        rank, axis = self._place(at)
        inner = stage.pipeline.stages
        shape = _stream_shape(self.stages, self.inputs, at, self.sharding.rank)
        split = rules.split_reduce(stage.reduce, axis, _count(stage.reduce, shape, self.sharding, rank, axis),
                                   rank)
        n = _consumed(self.stages, at + 1)
        local = self.stages[:at] + list(inner[:stage.reduce_at]) + list(split.state)
        finish = list(split.finish) + list(inner[stage.reduce_at + 1:])
        # (each rank reads the attached fields for its own shard: not shared)
        attached = self._combined(local, self.inputs[:n], split, finish, (), shared=False)
        if not stage.reduce.keepdim:
            attached = tuple(_kept(t, rules.reduced_axes(stage.reduce, rank)) for t in attached)
        width = stream_widths(tuple(self.stages[:at]))[-1] if at else 1
        self.stages[at:at + 1] = [ZipWith(rules.appended(width, len(attached)))]
        self.inputs[n:n] = attached
        return at + 1


def signature(inputs) -> tuple:
    """What result dtypes and derived forms depend on: each tensor's dtype and rank, each number's type."""
    return tuple((t.dtype, t.dim()) if isinstance(t, torch.Tensor) else type(t) for t in inputs)


def _dtypes(stages, inputs) -> tuple[torch.dtype, ...] | None:
    """The dtypes of the result fields of ``stages`` on ``inputs`` (torch's rules, on meta tensors), or None
    where the oracle cannot say (a runtime scalar it reads by name)."""
    return _dtypes_of(tuple(stages), signature(inputs))


@functools.lru_cache(maxsize=256)
def _dtypes_of(stages: tuple, kinds: tuple) -> tuple[torch.dtype, ...] | None:
    """:func:`_dtypes`, kept per signature: the oracle's evaluation costs milliseconds a call on the host."""
    metas = [torch.empty((1,) * k[1], dtype=k[0], device="meta") if isinstance(k, tuple) else k(1) for k in kinds]
    try:
        return tuple(f.dtype for f in evaluate_fields(PipelineIR(stages), metas))
    except Exception:  # (what it cannot evaluate the kernels will say, at their own call)
        return None


def _float32_sum(local: list, inputs) -> list:
    """``local``, whose last stage is a sum, summing a float16 or bfloat16 stream in float32 (``dtype=``): its
    state is then the unsharded kernel's float32 accumulator, not a rounded half (a shard's sum of 30000s
    overflows float16). The walk casts the results back to the unsharded pipeline's dtypes."""
    last = local[-1]
    if last.dtype is not None:
        return local
    entering = _dtypes(local[:-1], inputs) if len(local) > 1 else [next(
        (t.dtype for t in inputs if isinstance(t, torch.Tensor)), None)]
    if not entering or entering[0] not in (torch.float16, torch.bfloat16):
        return local
    return local[:-1] + [dataclasses.replace(last, dtype=torch.float32)]


def _kept(t: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
    """``t`` with a dimension of size 1 at each of ``axes``, as ``keepdim=True`` would have kept it."""
    for a in axes:
        t = t.unsqueeze(a)
    return t


def shard_sizes(length: int, problem: str | None, group, device) -> tuple[int, ...]:
    """Every rank's length along the sharded axis, gathered (one small all_gather) with whether its inputs were
    refused (``problem``): then every rank raises, none is left waiting at a later collective."""
    world = dist.get_world_size(group)
    mine = torch.tensor([length, problem is not None], dtype=torch.int64, device=device)
    parts = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(parts, mine, group=group)
    refused = [r for r, p in enumerate(parts) if int(p[1])]
    if refused:
        raise ArgumentError(problem or f"rank {refused[0]}'s inputs were refused (its error says why); every rank "
                            "raises", None)
    return tuple(int(p[0].item()) for p in parts)


def check_sizes(sizes, world: int, length: int, index: int) -> tuple[int, ...]:
    """``sizes`` as given by the caller, checked against the group and this rank's shard."""
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) != world or any(s < 0 for s in sizes):
        raise ArgumentError(f"sizes= gives {len(sizes)} lengths {list(sizes)} for a group of {world} ranks: give one "
                            "length (0 or more) per rank, in rank order, or leave it out to gather them", None)
    if sizes[index] != length:
        raise ArgumentError(f"sizes= says rank {index} holds {sizes[index]} elements along the sharded axis, but its "
                            f"inputs hold {length}; give each rank's own length", None)
    return sizes
