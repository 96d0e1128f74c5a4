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
"""
from __future__ import annotations

from ..pipeline import online
from ..pipeline.ir import Attach, Map, PipelineIR, Reduce, Stage, stream_widths
from ..pipeline.verify import operator_spec
from ..scalar.ir import Arg, Call, Function, substitute
from .bind import Binding, combined_dtypes

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
