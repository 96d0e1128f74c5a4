"""One-pass forms of attach chains, for rows swept in tiles.

A row held in one tile is read once whatever the chain; a longer row is swept once per attached fold and once
more. The two-pass softmax as a user writes it,

    attach max | map g(v, m) | attach (map h | sum) | ...      with h(g(v, m)) = exp(v - m),

sweeps three times: the maximum first, then the sum of ``exp(v - m)``, which needs it. The sum can instead be
rescaled as larger maxima arrive (Milakov and Gimelshein, "Online normalizer calculation for softmax", 2018):
one attach of the online normalizer's pairs (:mod:`tricomb.pipeline.online`) finds both, and a map gives the
stream the two attaches gave,

    attach (map lift | reduce log_sum_exp | map softmax_denominators) | map (v, m, s) -> (g(v, m), post(s)),

where ``post`` is the summing attach's stages after its reduce. Its special values are the two-pass form's: a
row holding NaN has a NaN maximum and sum; one holding ``+inf``, or only ``-inf``, sums ``exp(inf - inf)``,
NaN, in both. The sums differ by rounding only. :func:`one_pass` finds the chains; the planner uses the result for
rows that do not fit one tile (:func:`~tricomb.lower.fuse.plan`).

A reduce after attaches sweeps the row once more. When it sums terms that are 0 but at one position of the row,
the position known per row (cross-entropy's ``where(index(-1) == t, lse - v, 0)``, with ``t`` one target a
row), the sum is the term at that position: :func:`one_hot` finds such a reduce, and a swept row reads that one
element instead of its every tile (the gather of Liger-Kernel's cross-entropy forward, derived).
"""
from __future__ import annotations

from ..pipeline import online
from ..pipeline.ir import Attach, Map, PipelineIR, Reduce, Stage, stream_widths
from ..pipeline.verify import operator_spec
from ..scalar.ir import Arg, Call, Const, Function, substitute, walk
from .bind import Binding, combined_dtypes, input_stages
from .segments import Attach as AttachSegment, Elementwise, OneHot, Segment, TileReduce

_SHIFTED = Call("exp", (Call("sub", (Arg(0), Arg(1))),))  # exp(v - m), of the stream v and the attached maximum m


def _maximum_of_one_field(stage: Stage, width: int) -> bool:
    """An attach of exactly a builtin maximum over a one-field stream."""
    if not isinstance(stage, Attach) or width != 1 or len(stage.pipeline.stages) != 1:
        return False
    spec = operator_spec(stage.reduce.op)
    return spec is not None and spec.name == "maximum"


def _summed(map_: Stage, stage: Stage, axis) -> Function | None:
    """The stages after the summing attach's reduce as one function of its sum, when ``stage`` attaches a builtin
    sum over ``axis`` of exactly ``exp(v - m)`` as a function of what ``map_`` (the map after the maximum) gives
    (``h(g(v, m))``); else None."""
    if not (isinstance(map_, Map) and map_.fn.arity == 2 and isinstance(stage, Attach)):
        return None
    inner, r = stage.pipeline.stages, stage.reduce_at
    spec = operator_spec(stage.reduce.op)
    if spec is None or spec.name != "add" or stage.reduce.axis != axis or r > 1:
        return None
    element = substitute(inner[0].fn, list(map_.fn.outputs)) if r == 1 else list(map_.fn.outputs)
    if element != [_SHIFTED]:
        return None
    post: list = [Arg(0)]
    for after in inner[r + 1:]:
        post = substitute(after.fn, post)
    return Function(1, tuple(post), "post")


def _rewritten(first: Attach, map_: Map, post: Function) -> list[Stage]:
    """The online normalizer's attach and the map giving the two-pass form's stream ``(g(v, m), post(s))``."""
    where = first.location
    reduce = first.reduce
    pairs = PipelineIR((Map(online.LIFT, where), Reduce(online.LOG_SUM_EXP, reduce.axis, reduce.keepdim,
                                                        identity=online.IDENTITY, location=where),
                        Map(online.SOFTMAX_DENOMINATORS, where)))
    v, m, s = Arg(0), Arg(1), Arg(2)
    fields = substitute(map_.fn, [v, m]) + substitute(post, [s])
    return [Attach(pairs, where), Map(Function(3, tuple(fields), "two_pass_fields"), map_.location)]


def one_pass(pipeline: PipelineIR, binding: Binding) -> PipelineIR | None:
    """``pipeline`` with each two-pass softmax chain of float values (module docstring) in its one-pass form, or
    None when it holds none."""
    stages = list(pipeline.stages)
    widths = [1] + stream_widths(pipeline.stages)
    out: list[Stage] = []
    at, found = 0, False
    while at < len(stages):
        stage = stages[at]
        if at + 2 < len(stages) and _maximum_of_one_field(stage, widths[at]):
            entering = combined_dtypes(pipeline, binding, at - 1)[0] if at else binding.dtypes[0]
            post = _summed(stages[at + 1], stages[at + 2], stage.reduce.axis)
            if post is not None and entering.is_floating_point:
                out += _rewritten(stage, stages[at + 1], post)
                at, found = at + 3, True
                continue
        out.append(stage)
        at += 1
    return PipelineIR(tuple(out)) if found else None


def _sums_fields(stage: Reduce) -> bool:
    """The reduce adds field by field from zero: the builtin ``add``, or an operator on k-tuples whose field j is
    ``a_j + b_j`` (either order), with identity 0 in every field."""
    spec = operator_spec(stage.op)
    if spec is not None:
        return spec.name == "add"
    k = len(stage.op.outputs)
    ids = stage.identity if isinstance(stage.identity, tuple) else (stage.identity,)
    pairs = [{Call("add", (Arg(j), Arg(k + j))), Call("add", (Arg(k + j), Arg(j)))} for j in range(k)]
    return stage.op.arity == 2 * k and all(out in pair for out, pair in zip(stage.op.outputs, pairs)) and \
        all(type(e) in (int, float) and e == 0 for e in ids)


def _position_of(output, along: Call):
    """``X`` of an output ``where(coordinate == X, E, 0)`` (or ``X == coordinate``), else None."""
    if not (isinstance(output, Call) and output.op == "where" and isinstance(output.args[2], Const)
            and output.args[2].value == 0 and isinstance(output.args[0], Call) and output.args[0].op == "eq"):
        return None
    a, b = output.args[0].args
    return b if a == along else a if b == along else None


def one_hot(segments: tuple[Segment, ...], pipeline: PipelineIR, binding: Binding) -> OneHot | None:
    """The reduce after attaches as a one-hot sum (module docstring), or None: the last fold is a field-by-field
    sum over one dimension, right after one map or zip_with that follows the last attach, each of whose outputs
    is ``where(index == X, E, 0)`` with one ``X`` for all, read from attached results, inputs constant along the
    row, constants and the coordinates of other dimensions only."""
    folds = [s for s in segments if isinstance(s, TileReduce)]
    if not folds or folds[-1].attached or len(binding.axes) != 1 or not any(f.attached for f in folds):
        return None
    fold = folds[-1]
    at = segments.index(fold)
    before, attach = segments[at - 1], segments[at - 2]
    if not (isinstance(before, Elementwise) and before.within is None and len(before.stages) == 1
            and isinstance(attach, AttachSegment) and _sums_fields(fold.stage)):
        return None
    fn = before.stages[0].fn
    along = Call("coordinate_in", (Const(binding.axes[0]),))
    positions = {_position_of(out, along) for out in fn.outputs}
    if len(positions) != 1 or None in positions:
        return None
    position = positions.pop()
    sources = _sources(segments, pipeline, binding, before.first, fn.arity)
    for node in walk(position):
        if isinstance(node, Arg) and sources[node.index][0] == "element" or node == along or \
                isinstance(node, Call) and node.op in ("position", "count"):
            return None
    return OneHot(fold, Function(fn.arity, (position,), "one_hot_position"), sources)


def _sources(segments: tuple[Segment, ...], pipeline: PipelineIR, binding: Binding, at: int,
             arity: int) -> tuple[tuple, ...]:
    """Where each argument of the stage at ``at`` comes from: the stream's fields (every attached fold's results,
    after the fields entering the first attach), then the inputs the stage brings in."""
    attached = [s.fold for s in segments if isinstance(s, AttachSegment)]
    unknown = tuple([("element",)] * arity)
    if any(not isinstance(s, Attach) for s in pipeline.stages[attached[0].at:at]):
        return unknown  # a map between the attaches remakes the stream: its fields' origins are not followed
    widths = [1] + stream_widths(pipeline.stages)
    stream: list[tuple] = [("element",)] * widths[attached[0].at]
    for n, fold in enumerate(attached):
        results = widths[fold.at + 1] - widths[fold.at]
        stream += [("attached", n, j) for j in range(results)]
    row = {f"in{i}" for i, once in enumerate(binding.row_inputs) if once}
    new = [f"in{i}" for i, owner in enumerate(input_stages(pipeline)) if owner == at]
    sources = stream + [("input", name) if name in row else ("element",) for name in new]
    return tuple(sources) if len(sources) == arity else unknown
