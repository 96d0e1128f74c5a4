"""Emitting the kernel of a plan: the ``@triton.jit`` kernel itself.

One emitter per concept: :class:`Param` (the kernel's parameters, as data), :func:`emit_offsets` (an index
split over dimension groups into per-tensor offsets), :func:`emit_loads`, :func:`emit_stages` (an
:class:`~tricomb.lower.segments.Elementwise` segment), :func:`store` (the :class:`~tricomb.lower.segments.Store`
segment), and the body of an elementwise kernel; the reduce and scan bodies, which add a fold, are in
:mod:`tricomb.codegen.combine` and :mod:`tricomb.codegen.fold`. Each emitted line that comes from a pipeline
stage carries a comment naming that stage.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lower.bind import input_stages
from ..lower.fuse import KernelPlan
from ..lower.segments import Elementwise, Slot, Store
from ..pipeline.ir import Map, ZipWith
from ..pipeline.printer import stage_text
from ..pipeline.scalars import used_scalars
from ..scalar.builtins import OPS
from ..scalar.dtypes import held_dtype
from ..scalar.ir import Call, walk
from .scalar import ScalarContext, Value, emit_function, from_storage, render_const, runtime_parameter, to_storage
from .writer import Writer


POSITION = OPS["position"].leaf  # the kernel variable holding each element's position along the folded axes


def uses_position(p: KernelPlan) -> bool:
    """Whether a stage of the plan reads the elements' positions (an argmax's or cummax's pairing map)."""
    return any(isinstance(node, Call) and OPS[node.op].leaf == POSITION
               for fn in p.pipeline.functions for node in walk(*fn.outputs))


def coordinates_read(p: KernelPlan, phase: str) -> list[int]:
    """The iteration dimensions whose ``coordinate_<phase>`` (an ``index``, :mod:`tricomb.lower.coordinates`) a
    stage of the plan reads."""
    op = f"coordinate_{phase}"
    return sorted({node.args[0].value for fn in p.pipeline.functions for node in walk(*fn.outputs)
                   if isinstance(node, Call) and node.op == op})


def emit_coordinates(w: Writer, p: KernelPlan, phase: str, parts: list[tuple[dict[int, str], str]],
                     shape: str) -> None:
    """Define the kernel variable of each coordinate the plan reads in ``phase``, int64, broadcastable to
    ``shape`` (a row's coordinate is a column, a position along the row a row of the tile; every fold and store
    broadcasts its operands to the tile): the coordinate of its dimension's group from the first of ``parts``
    (each: coordinates by group, from :func:`emit_offsets`, and the indexing that lays them along ``shape``) that
    has it; 0 for a dimension of size 1, or a reduced one read after its reduce."""
    for d in coordinates_read(p, phase):
        name = OPS[f"coordinate_{phase}"].leaf.format(d)
        group = next((g for g, grp in enumerate(p.binding.groups) if d in grp.dims), None)
        found = [f"{coords[group]}{suffix}" for coords, suffix in parts if group in coords]
        if found:
            w.line(f"{name} = ({found[0]}).to(tl.int64)", comment=f"index along dimension {d}")
        else:
            w.line(f"{name} = tl.full({shape}, 0, tl.int64)", comment=f"index along dimension {d}, of size 1 here")


def group_size(g: int) -> str:
    return f"n{g}"


def group_stride(slot: Slot, g: int) -> str:
    return f"s_{slot.name}_{g}"


@dataclass(frozen=True, slots=True)
class Param:
    """A kernel parameter ``name`` (a ``tl.constexpr`` when ``constexpr``) and ``host``: the expression the
    launcher fixes it to, or None for an argument given at each launch (the slots' tensors, a look-back's status
    value), which come first."""

    name: str
    host: str | None
    constexpr: bool = False

    @property
    def declaration(self) -> str:
        """The parameter as the kernel's ``def`` lists it."""
        return f"{self.name}: tl.constexpr" if self.constexpr else self.name


def given(name: str) -> Param:
    """A parameter given at each launch."""
    return Param(name, None)


def fixed(name: str, host: str | None = None) -> Param:
    """A parameter the launcher fixes to the host variable of its name (or to ``host``)."""
    return Param(name, host or name)


def meta(name: str, host: str | None = None) -> Param:
    """A ``tl.constexpr`` the launcher fixes to the schedule's entry of its name (or to ``host``)."""
    return Param(name, host or f"cfg[{name!r}]", constexpr=True)


def runtime_words(p: KernelPlan) -> list[str]:
    """The kernel parameters of the runtime scalars the plan reads, in order: one int32 for a bool, the high and
    low halves of a 64-bit value for an int or a float (:func:`~tricomb.codegen.host._scalar_words`)."""
    names = []
    for index, kind in used_scalars(p.pipeline):
        stem = runtime_parameter(index)
        names += [stem] if kind is bool else [f"{stem}_hi", f"{stem}_lo"]
    return names


def layout_parameters(p: KernelPlan) -> list[Param]:
    """Each dimension group's size, then each slot's stride along each group."""
    groups = range(len(p.binding.groups))
    return [fixed(group_size(g)) for g in groups] + [fixed(group_stride(s, g)) for s in p.slots for g in groups]


def emit_offsets(w: Writer, index: str, groups: list[int], slots, tag: str,
                 coords: dict[int, str] | None = None) -> dict[str, str]:
    """Split the index vector ``index`` over ``groups`` (outer to inner); one offset variable per slot.
    ``coords``, when given, receives each group's coordinate expression."""
    offsets = {}
    if not groups:
        for slot in slots:
            offsets[slot.name] = f"{tag}_{slot.name}"
            w.line(f"{tag}_{slot.name} = {index} * 0")
        return offsets
    coords = {} if coords is None else coords
    rest = index
    for j, g in enumerate(reversed(groups)):
        if j == len(groups) - 1:
            coords[g] = rest
            continue
        coords[g] = f"{tag}_i{g}"
        w.line(f"{coords[g]} = {rest} % {group_size(g)}")
        w.line(f"{tag}_q{g} = {rest} // {group_size(g)}")
        rest = f"{tag}_q{g}"
    for slot in slots:
        offsets[slot.name] = f"{tag}_{slot.name}"
        terms = " + ".join(f"{coords[g]} * {group_stride(slot, g)}" for g in groups)
        w.line(f"{tag}_{slot.name} = {terms}")
    return offsets


def row_slots(p: KernelPlan) -> frozenset[str]:
    """The inputs constant along the folded axes (stride 0 along each: a ``(B, 1)`` target beside ``(B, C)``
    logits), which a tile loads once per row, not once per element."""
    return frozenset(f"in{i}" for i, once in enumerate(p.binding.row_inputs) if once and not p.inputs[i].lag)


def column_slots(p: KernelPlan) -> frozenset[str]:
    """The inputs constant along the kept axes (stride 0 along each: a norm's weight beside its input), which a
    program stepping through row tiles loads once."""
    return frozenset(f"in{i}" for i, once in enumerate(p.binding.column_inputs) if once)


def row_bytes(p: KernelPlan) -> int:
    """The bytes a program stepping through row tiles loads for each element of a tile: the itemsizes of the
    inputs not in :func:`column_slots` (an input read once a row is counted as if read at every element)."""
    once = column_slots(p)
    return sum(dtype.itemsize for i, dtype in enumerate(p.binding.dtypes) if f"in{i}" not in once)


def emit_loads(w: Writer, ctx: ScalarContext, p: KernelPlan, slots, address: dict[str, str],
               mask: str, whole: str | None = None, once: frozenset[str] = frozenset(),
               lagged: dict[str, str] | None = None) -> dict[str, Value]:
    """Load each slot at its address expression, converted to its compute dtype; a slot in ``once`` (of
    :func:`row_slots`, addressed by its rows alone) is loaded as a column, one element a row; a slot in ``lagged``
    (a :class:`~tricomb.lower.segments.Slot` with a lag, addressed at the place it reads) under the mask given
    there, its ``fill`` elsewhere. With ``whole`` (a scalar condition that implies every mask holds everywhere), a
    whole tile is loaded without the masks: Triton sets each lane of a masked load to ``other`` before loading
    it, and ptxas then issues the loads in two waves, the second after the first one's values are used, so a
    tile waits for memory twice (P4's look-back scan, SASS compiled for sm_90: bench/NOTES.md). Unmasked, every
    load of the tile is issued before any use."""
    values = {}
    lagged = lagged or {}
    ranks = dict(zip((s.name for s in p.inputs), p.binding.ranks))
    masks = {s.name: "row_mask[:, None]" if s.name in once else lagged.get(s.name, mask) for s in slots}
    sources = {s.name: f"tl.load({s.name} + {address[s.name]}, mask={masks[s.name]}, other={render_const(s.fill)})"
               for s in slots}
    if whole is not None and slots:
        loaded = {s.name: f"x_{s.name}" if held_dtype(s.dtype) == s.dtype else f"raw_{s.name}" for s in slots}
        with w.block(f"if {whole}:"):
            w.comment("a whole tile: no mask, so every load is issued before any use")
            w.lines([f"{loaded[s.name]} = tl.load({s.name} + {address[s.name]})" for s in slots])
        with w.block("else:"):
            w.lines([f"{loaded[name]} = {load}" for name, load in sources.items()])
        sources = loaded
    for slot in slots:
        var = f"x_{slot.name}"
        if sources[slot.name] != var:
            w.line(f"{var} = {from_storage(ctx, sources[slot.name], slot.dtype)}")
        values[slot.name] = Value(var, slot.dtype, ranks[slot.name] == 0)
    return values


def emit_stages(w: Writer, ctx: ScalarContext, p: KernelPlan, segment: Elementwise, stream: list[Value],
                values: dict[str, Value], shape: str) -> list[Value]:
    """Apply the segment's map/zip_with stages to the stream's fields; return the resulting fields. A stage's
    function takes the stream's fields, then the inputs the stage brings in. An attached pipeline's stage is
    named ``stage a.i``: stage i of the pipeline attached at a."""
    owners = input_stages(p.pipeline) if segment.within is None else []  # (an attached pipeline brings none)
    for offset, stage in enumerate(segment.stages):
        index = segment.first + offset
        new = [values[f"in{i}"] for i, owner in enumerate(owners) if owner == index]
        at = index if segment.within is None else f"{segment.within}.{index}"
        w.comment(f"stage {at}: {stage_text(stage)}")
        stream = emit_function(w, ctx, stage.fn, stream + new, shape)
    return stream


def store(w: Writer, ctx: ScalarContext, p: KernelPlan, segment: Store, values: list[Value], addresses: dict[str, str],
          mask: str, coords: dict[int, str] | None = None) -> None:
    """Store each result field at its output slot's address. With ``coords`` (elementwise plans), a field
    computed from only some of the inputs is smaller than the iteration space (torch's shape for it): along a
    dimension group where its stride is 0, only coordinate 0 stores, so no element is written twice."""
    every = frozenset(range(len(p.inputs)))
    for slot, value in zip(segment.outputs, values):
        inputs = p.field_inputs[p.outputs.index(slot)]
        where = mask
        if coords is not None and inputs != every:
            where = f"keep_{slot.name}"
            w.line(f"{where} = {mask}")
            for g, c in sorted(coords.items()):
                w.line(f"{where} = {scalar_where(f'{group_stride(slot, g)} != 0', where, f'{where} & ({c} == 0)')}")
        w.line(f"tl.store({slot.name} + {addresses[slot.name]}, {to_storage(ctx, value.text, slot.dtype)}, "
               f"mask={where})")


def scalar_where(condition: str, then: str, otherwise: str) -> str:
    """A block of bools: ``then`` where the scalar ``condition`` holds, ``otherwise`` where it does not. A scalar
    condition meets a block only through this select, never through ``&`` or ``|``: Triton's interpreter
    broadcasts a scalar comparison into int32 lanes, and 3.9's refuses a mask those lanes reach ("mask has
    unsupported dtype"). The select's lanes are bools in every Triton of the range, so long as ``then`` and
    ``otherwise`` are blocks or constants (a scalar comparison there would be broadcast too); on the GPU it costs
    what the ``&`` did."""
    return f"tl.where({condition}, {then}, {otherwise})"


def program_ids(w: Writer, names: list[str]) -> None:
    for axis, name in enumerate(names):
        w.line(f"{name} = tl.program_id({axis})")
    with w.block("if WIDE:"):
        w.comment("offsets may pass 2**31 - 1: index in int64")
        for name in names:
            w.line(f"{name} = {name}.to(tl.int64)")


def emit_map_body(w: Writer, ctx: ScalarContext, p: KernelPlan) -> None:
    """A flat index over the output; every stage elementwise."""
    program_ids(w, ["pid"])
    w.line("idx = pid * BLOCK + tl.arange(0, BLOCK)")
    w.line("mask = idx < numel")
    groups = list(range(len(p.binding.groups)))
    coords: dict[int, str] = {}
    offsets = emit_offsets(w, "idx", groups, p.slots, "o", coords)
    emit_coordinates(w, p, "in", [(coords, "")], "[BLOCK]")
    values = emit_loads(w, ctx, p, p.inputs, offsets, "mask")
    elementwise, output = p.segments
    result = emit_stages(w, ctx, p, elementwise, first_stream(p, values), values, "[BLOCK]")
    store(w, ctx, p, output, result, offsets, "mask", coords)


def first_stream(p: KernelPlan, values: dict[str, Value]) -> list[Value]:
    """The stream entering stage 0: nothing when stage 0 is a map or zip_with (it takes its inputs as new ones),
    else input 0 itself (a pipeline that starts with its reduce or scan)."""
    return [] if isinstance(p.pipeline.stages[0], (Map, ZipWith)) else [values["in0"]]


def fields(base: str, width: int) -> list[str]:
    """Variable names for the fields of an accumulator: ``base`` for one field; ``base0``, ``base1``, ... for k."""
    return [base] if width == 1 else [f"{base}{j}" for j in range(width)]

