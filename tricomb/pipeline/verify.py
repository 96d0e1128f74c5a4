"""Structural checks of a pipeline, before any tensor is seen.

:func:`verify` raises the first problem found, at the stage that has it; the checks that need shapes and
dtypes (broadcasting, axes) happen when the pipeline is bound to tensors (:mod:`tricomb.lower.bind`).
"""
from __future__ import annotations

import functools

import torch

from ..errors import ArgumentError, ArityError, AxisError, DTypeError, LawError, UnsupportedError
from ..scalar.builtins import INDEX, OPS, OpSpec
from ..scalar.inline import globals_key
from ..scalar.ir import Arg, Call, Const, Function, JitCall, jit_functions, walk
from .operators import Laws, check_laws, declared_laws, fits, identities, identity_key
from .operators import builtin_parts  # noqa: F401 (read here by the passes and the torch meaning)
from .shorthands import BY_OPERATOR, INDEX_SHORTHANDS, SHORTHANDS
from .ir import Attach, Map, PipelineIR, Reduce, Scan, Stage, ZipWith, new_inputs, stream_widths


def operator_spec(op: Function) -> OpSpec | None:
    """The table row of ``op`` when it is exactly a builtin binary operator (``tc.add``, ``lambda a, b: a + b``)."""
    out = op.outputs[0] if len(op.outputs) == 1 else None
    if op.arity == 2 and isinstance(out, Call) and out.args == (Arg(0), Arg(1)):
        return OPS[out.op]
    if op.arity == 2 and isinstance(out, Call) and out.args == (Arg(1), Arg(0)) and OPS[out.op].commutative:
        return OPS[out.op]
    return None


def operator_identity(stage: Reduce | Scan):
    """The identity of the stage's operator: the one given (``identity=``), else the builtin's."""
    if stage.identity is not None:
        return stage.identity
    spec = operator_spec(stage.op)
    return spec.identity if spec is not None else None


def _laws(op: Function, identity, location) -> Laws:
    """The laws of a stage's operator with its identity: declared (tricomb's own), or checked (a builtin's
    identity exactly, a user operator on the sample); once per operator, identity, location and values of the
    globals its ``@triton.jit`` functions read."""
    return _cached_laws(op, _law_key(op, identity), identity, location)


def _law_key(op: Function, identity) -> tuple:
    """What a law check depends on beyond the operator's IR: the identity by type (``0``, ``0.0`` and ``False``
    are checked apart) and what its ``@triton.jit`` functions read now (a changed global is checked again)."""
    return identity_key(identity), globals_key(jit_functions(op))


@functools.lru_cache(maxsize=256)
def _cached_laws(op: Function, key, identity, location) -> Laws:
    return declared_laws(op, identity) or check_laws(op, identity, location=location)


def check_in_dtypes(stage: Reduce | Scan, dtypes: tuple[torch.dtype, ...]) -> None:
    """What the values' dtypes decide, checked when the stage is planned for them (``dtypes``: the compute dtype of
    each field the operator combines). An identity holds in some dtypes only (``-128`` is ``maximum``'s for int8,
    ``finfo(float32).max`` is a minimum's for float32), and an operator that is associative on floats may not be on
    wrapping integers: a given identity is checked in these dtypes (a builtin's exactly), and so is a user
    operator combining integers or bools (``check_laws(..., dtypes=dtypes)``). An identity that is not a value of
    its dtype is left to the plan's DTypeError, which says what fits. Raises :class:`LawError`."""
    if stage.index or (stage.identity is not None and not all(
            fits(e, d) for e, d in zip(identities(stage.identity), dtypes))):
        return
    spec = operator_spec(stage.op)
    if (spec is not None and spec.identity is not None and stage.identity is None) or \
            declared_laws(stage.op, stage.identity) is not None:
        return
    if stage.identity is None and all(d.is_floating_point for d in dtypes):
        _laws(stage.op, None, stage.location)  # what building the stage checked (again if a global changed)
        return
    _cached_laws_in(stage.op, _law_key(stage.op, stage.identity), stage.identity, tuple(dtypes), stage.location,
                    isinstance(stage, Reduce))


@functools.lru_cache(maxsize=256)
def _cached_laws_in(op: Function, key, identity, dtypes: tuple[torch.dtype, ...], location, reduce: bool) -> None:
    laws = check_laws(op, identity, location=location, dtypes=dtypes)
    if reduce and not laws.commutative and _laws(op, identity, location).commutative:
        shown = ", ".join(dict.fromkeys(str(d)[6:] for d in dtypes))
        raise LawError(f"operator {op.name!r} commutes on floats but not on {shown} values, and a reduce whose "
                       "operator commutes combines lanes in any order; reduce float values, or scan (a scan keeps "
                       "the order of its operands) and take the last element", location)


def _check_user_operator(stage: Reduce | Scan, kind: str, width: int) -> None:
    """An operator that is not a builtin: 2k arguments and k results for a stream of k fields, associative (checked
    on a sample, with its identity when it has one: without one, tricomb adds a validity flag, see
    :mod:`tricomb.lower.totalize`). One that does not commute is combined in order (:func:`operator_commutes`)."""
    op = stage.op
    k = len(op.outputs)
    if k == 1 and isinstance(op.outputs[0], JitCall) and op.arity > 2:
        raise UnsupportedError(f"{kind}'s operator {op.name!r} is a @triton.jit function of {op.arity} arguments; "
                               "tricomb takes a @triton.jit function as one value, so an operator on tuples must be "
                               "a Python def or lambda returning the fields (it may call @triton.jit functions)",
                               stage.location)
    if any(isinstance(node, Call) and OPS[node.op].runtime is not None for node in walk(*op.outputs)):
        raise UnsupportedError(f"{kind}'s operator {op.name!r} reads a runtime scalar (a param, or a number in env): "
                               "an operator's laws are checked, and its combines compiled, for its constants alone. "
                               "Apply the scalar in a map before the stage, or write the number into the operator",
                               stage.location)
    if any(isinstance(node, Call) and node.op == INDEX.name for node in walk(*op.outputs)):
        raise UnsupportedError(f"{kind}'s operator {op.name!r} calls index(): an operator combines accumulated "
                               "values, which have no coordinate. Pair each element with its index in a map before "
                               f"the {kind}", stage.location)
    if op.arity != 2 * k:
        raise ArityError(f"{kind}'s operator {op.name!r} takes {op.arity} arguments and returns {k} value(s); an "
                         "operator combines two k-tuples into one, so it takes 2k arguments (the left tuple's "
                         "fields, then the right one's) and returns k values", stage.location)
    if width and k != width:  # (as the first stage, a fragment: check_callable checks it before a run)
        fix = "return a k-tuple from the map or zip_with before it" if width == 1 else \
            f"give it {2 * width} arguments and {width} results"
        raise ArityError(f"{kind}'s operator {op.name!r} combines {k}-tuples but the stream entering it has "
                         f"{width} field(s); {fix}", stage.location)
    if stage.identity is None and isinstance(stage, Scan) and stage.exclusive:
        raise UnsupportedError(f"an exclusive scan's first element is its operator's identity, and {op.name!r} has "
                               "none: give identity= (the value e with e op x == x) or scan inclusively",
                               stage.location)
    if stage.dtype is not None or (isinstance(stage, Reduce) and (stage.mean or stage.index or stage.skip_nan)):
        raise UnsupportedError(f"dtype=, mean, argmax and nansum take builtin operators, not {op.name!r}",
                               stage.location)
    _laws(op, stage.identity, stage.location)


def operator_commutes(stage: Reduce | Scan) -> bool:
    """Whether the stage's operator commutes (builtins do; a user operator as its laws say). A reduce with one
    that does not is combined in order: element by element in row-major order over the reduced axes."""
    spec = operator_spec(stage.op)
    if spec is not None and spec.identity is not None:
        return True
    return _laws(stage.op, stage.identity, stage.location).commutative


def _check_operator(stage: Reduce | Scan, kind: str, width: int) -> None:
    spec = operator_spec(stage.op)
    if spec is None or spec.identity is None:
        _check_user_operator(stage, kind, width)
        return
    if width > 1:
        raise ArityError(f"this {kind} receives a {width}-tuple stream but its operator {spec.name} combines single "
                         f"values; give an operator of {2 * width} arguments returning {width} values, or map to "
                         "one field first", stage.location)
    if stage.identity is not None:
        _laws(stage.op, stage.identity, stage.location)  # a builtin given an identity: it must be the builtin's own
    if stage.index:
        _check_index_stage(stage, spec, kind)
        return
    if isinstance(stage, Reduce) and stage.skip_nan and spec.name != "add":
        raise UnsupportedError(f"skipping NaN (nansum) needs the operator add, not {spec.name}", stage.location)
    if isinstance(stage, Scan) and stage.dtype == torch.bool:
        raise DTypeError("a scan takes no dtype=bool: torch.cumsum and torch.cumprod refuse it; scan in an integer "
                         "dtype and compare with 0 after", stage.location)
    short = SHORTHANDS.get(BY_OPERATOR.get((kind, spec.name), ""))
    if stage.dtype is not None and not (short and short.takes_dtype):
        like = f" ({short.torch_name} has none)" if short else ""
        raise UnsupportedError(f"{kind} with operator {spec.name} takes no dtype={like}; convert the stream "
                               "before it instead, with a map", stage.location)


def _check_index_stage(stage: Reduce | Scan, spec: OpSpec, kind: str) -> None:
    name = INDEX_SHORTHANDS.get((kind, spec.name))
    if name is None:
        names = "argmax/argmin" if kind == "reduce" else "cummax/cummin"
        raise UnsupportedError(f"an index {kind} takes the operator maximum or minimum ({names}), not {spec.name}",
                               stage.location)
    if isinstance(stage, Scan):
        if stage.dtype is not None:
            raise UnsupportedError(f"{name} takes no dtype= (torch.{name} has none)", stage.location)
        return
    if stage.axis is not None and len(stage.axis) != 1:
        raise AxisError(f"{name} takes axis=None or one int axis, as torch.{name}; got axis={stage.axis}",
                        stage.location)
    if stage.dtype is not None or stage.mean:
        raise UnsupportedError(f"{name} takes no dtype= (torch.{name} has none)", stage.location)


def _check_function(stage: Stage, index: int, width: int) -> None:
    """``width``: the fields of the stream entering the stage (0 for the first stage)."""
    fn = stage.fn
    for node in walk(*fn.outputs):
        if isinstance(node, Call) and node.op == INDEX.name and not (
                isinstance(node.args[0], Const) and type(node.args[0].value) is int):
            raise ArgumentError(f"{fn.name!r} calls index with a value of the element: index takes one axis, an int such "
                                "as -1 (tc.index(-1)); it reads the element's coordinate, not a value",
                                stage.location)
    passes = "one element" if width <= 1 else f"a {width}-tuple stream's fields as {width} arguments"
    if isinstance(stage, Map) and index > 0 and fn.arity != width:
        fix = "use zip_with for functions of several inputs" if width <= 1 else \
            f"give it {width} parameters, one per field"
        raise ArityError(f"map's function {fn.name!r} takes {fn.arity} arguments but map passes {passes}; {fix}",
                         stage.location)
    if isinstance(stage, ZipWith) and stage.constant_along and index > 0 and fn.arity <= width:
        raise ArgumentError(f"zip_with's function {fn.name!r} brings in no input (it takes the stream's {width} "
                            "field(s) only), so constant_along has nothing to check; drop it", stage.location)
    if isinstance(stage, ZipWith) and fn.arity < width + 1:
        need = "at least one argument" if index == 0 else \
            f"at least {width + 1} arguments (the stream's {width} field(s) and a new input)"
        raise ArityError(f"zip_with's function {fn.name!r} takes {fn.arity} arguments; it needs {need}",
                         stage.location)


def verify(pipeline: PipelineIR) -> PipelineIR:
    """Check ``pipeline`` and return it unchanged.

    Raises :class:`ArityError` for a function or operator whose argument count does not fit its stage (an
    operator on k-tuples takes 2k arguments and needs a k-field stream), :class:`LawError` for a user operator
    that is not associative or whose identity is not one in any dtype, or a builtin given another identity than
    its own (running the stage checks both again in its values' dtypes: :func:`check_in_dtypes`), and
    :class:`UnsupportedError` for what this version cannot compile: a user operator without identity=, a
    non-commuting reduce operator, more than one reduce or scan, or a reduce whose operator does not commute after
    a reversed scan.
    """
    combines: list[Stage] = []
    attached = False
    widths = [0] + stream_widths(pipeline.stages)
    for i, stage in enumerate(pipeline.stages):
        if isinstance(stage, (Map, ZipWith)):
            _check_function(stage, i, widths[i])
            continue
        if isinstance(stage, Attach):
            _check_attach(stage, widths[i], combines)
            attached = True
            continue
        kind = "reduce" if isinstance(stage, Reduce) else "scan"
        if attached and isinstance(stage, Scan):
            raise UnsupportedError("a scan after an attach is not compiled yet: one kernel holds attaches and a "
                                   "reduce after them; split the pipeline before the scan", stage.location)
        _check_operator(stage, kind, widths[i])
        combines.append(stage)
        scan_then_reduce = len(combines) == 2 and isinstance(combines[0], Scan) and isinstance(stage, Reduce)
        over_rows = len(combines) == 2 and isinstance(combines[0], Reduce) and isinstance(stage, Reduce)
        if len(combines) > 1 and not (scan_then_reduce or over_rows):
            raise UnsupportedError(f"this {kind} is the pipeline's {_ORDINALS.get(len(combines), 'next')} reduce or "
                                   "scan; one pipeline holds one, a scan and then a reduce over the scanned axis, or "
                                   "a reduce and then a reduce over all the axes it leaves (a library function may "
                                   "hold some: cross_entropy(reduction='mean') ends in two). Split it into two "
                                   "pipelines", stage.location)
        if over_rows:
            _check_rows_reduce(pipeline, i)
        if scan_then_reduce and combines[0].reverse and not operator_commutes(stage):
            raise UnsupportedError("this reduce's operator does not commute, and the reversed scan before it "
                                   "hands it the scanned values from the last to the first, not in index order; "
                                   "split it into two pipelines (the scan, then the reduce)", stage.location)
    if pipeline.column_sums:
        _check_column_sums(pipeline, combines, attached, widths[-1])
    _check_lags(pipeline)
    return pipeline


def _check_lags(pipeline: PipelineIR) -> None:
    """Lags (:class:`~.ir.Lag`) read inputs of a zip_with along the axis of the pipeline's one scan, before any
    reduce: the kernel of a scan reads each row in order, so the place before is an offset of the place read."""
    stages = pipeline.stages
    scan = next((s for s in stages if isinstance(s, Scan)), None)
    counts = new_inputs(stages)
    for i, stage in enumerate(stages):
        for lag in stage.lags if isinstance(stage, ZipWith) else ():
            if scan is None or any(isinstance(s, (Reduce, Attach)) for s in stages[:i]) or lag.axis != scan.axis:
                raise UnsupportedError(f"a lag along axis {lag.axis} needs a scan along that axis in the pipeline "
                                       "and no reduce before it", stage.location)
            if not 0 <= lag.input < counts[i]:
                raise UnsupportedError(f"a lag names input {lag.input} of a zip_with that brings in {counts[i]}",
                                       stage.location)


def _check_column_sums(pipeline: PipelineIR, combines: list[Stage], attached: bool, width: int) -> None:
    """Fields summed over the rows (:attr:`~.ir.PipelineIR.column_sums`) come from the element stream of a
    pipeline of attaches: the programs that hold its rows fold them."""
    sums = pipeline.column_sums
    if not attached or combines:
        raise UnsupportedError("column_sums needs a pipeline of attaches with no reduce or scan outside them (the "
                               "fields summed are the elements of its rows)", pipeline.stages[-1].location)
    if len(set(sums)) != len(sums) or not all(isinstance(j, int) and 0 <= j < width for j in sums):
        raise UnsupportedError(f"column_sums={sums!r} must name distinct result fields, each in [0, {width})",
                               pipeline.stages[-1].location)


_ORDINALS = {2: "second", 3: "third"}


def _check_rows_reduce(pipeline: PipelineIR, at: int) -> None:
    """The reduce at ``at`` follows another reduce: it folds the rows' results, over all the axes the first one
    leaves (bind checks the axes), each program's rows and then the programs' partials in index order. That
    order is not the rows' order, so its operator must commute; it counts nothing along the rows (``mean``'s
    count and ``argmax``'s positions count along the first reduce's row), and nothing after it reads
    coordinates or brings in an input (no row is left to index)."""
    stage = pipeline.stages[at]
    if stage.mean:
        raise UnsupportedError("a reduce over the rows after a reduce takes no mean yet: its count is along the "
                               "first reduce's rows. Sum here and divide in a map after (the count of rows is the "
                               "product of the sizes), or split the pipeline", stage.location)
    if stage.index:
        raise UnsupportedError("a reduce over the rows after a reduce takes no argmax/argmin yet: its positions are "
                               "along the first reduce's rows. Split the pipeline: the per-row reduce, then the "
                               "argmax of its result", stage.location)
    if not operator_commutes(stage):
        raise UnsupportedError("a reduce over the rows after a reduce folds each program's rows and then the "
                               "programs' partials, not the rows in order, so its operator must commute; split "
                               "the pipeline in two", stage.location)
    for later, brought in zip(pipeline.stages[at + 1:], new_inputs(pipeline.stages)[at + 1:]):
        if brought:
            raise UnsupportedError("a zip_with after the reduce over the rows brings in an input, which one "
                                   "kernel does not load there yet; combine it in a separate step",
                                   later.location)
        if isinstance(later, (Map, ZipWith)) and any(isinstance(node, Call) and node.op == INDEX.name
                                                      for node in walk(*later.fn.outputs)):
            raise UnsupportedError("index() after the reduce over the rows: the result is one element, with no "
                                   "row or coordinate left; write 0", later.location)


def entering_width(pipeline: PipelineIR) -> int:
    """How many fields the first stage of ``pipeline`` takes from a stream: a map's or zip_with's arity, a reduce's
    or scan's operator's k."""
    first = pipeline.stages[0]
    if isinstance(first, (Map, ZipWith)):
        return first.fn.arity
    return entering_width(first.pipeline) if isinstance(first, Attach) else len(first.op.outputs)


def _check_attach(stage: Attach, width: int, combines: list[Stage]) -> None:
    """An attached pipeline: maps (and zip_withs of only the stream's fields), one reduce, maps after it, on a
    stream of ``width`` fields (0 for the first stage: the pipeline's own first stage says, and
    :func:`check_callable` checks it before a run). Raises ArityError or UnsupportedError at the stage."""
    if combines:
        raise UnsupportedError("an attach after a reduce or scan is not compiled yet: attach before it, or split "
                               "the pipeline in two", stage.location)
    stages = stage.pipeline.stages
    width = width or entering_width(stage.pipeline)
    reduces = [s for s in stages if isinstance(s, Reduce)]
    if any(isinstance(s, Attach) for s in stages):
        raise UnsupportedError("an attached pipeline is a reduction without an attach of its own, but this one holds "
                               "one (tc.library.softmax and cross_entropy do); attach a reduction (for softmax's: "
                               "softmax_denominators), or attach each reduction on its own", stage.location)
    if any(isinstance(s, ZipWith) and s.constant_along for s in stages):
        raise ArgumentError("a zip_with of an attached pipeline has constant_along, but an attached pipeline brings "
                            "in no input for it to check; give constant_along to the zip_with that brings the input "
                            "in, after the attach", stage.location)
    if any(isinstance(s, Scan) for s in stages):
        raise UnsupportedError("an attached pipeline holds one reduce and no scan, but this one holds a scan; a scan "
                               "with an attach is not compiled yet: split the pipeline", stage.location)
    if len(reduces) != 1:
        raise UnsupportedError("an attached pipeline ends in a reduce (tc.sum(axis=-1), tc.max(axis=-1), a library "
                               "reduction such as softmax_denominators), but this one holds none; in text, put a "
                               "pipeline of several stages in parentheses: attach (map square | mean(axis=-1))",
                               stage.location)
    for inner in stages:
        if isinstance(inner, Reduce):
            _check_operator(inner, "reduce", width)
        elif inner.fn.arity > width:
            raise UnsupportedError(f"the attached pipeline's {type(inner).__name__.lower()} {inner.fn.name!r} takes "
                                   f"{inner.fn.arity} arguments but the stream has {width} field(s): an attached "
                                   "pipeline brings in no input of its own. zip_with the input before the attach",
                                   inner.location)
        elif inner.fn.arity < width:
            raise ArityError(f"the attached pipeline's {type(inner).__name__.lower()} {inner.fn.name!r} takes "
                             f"{inner.fn.arity} arguments but the stream has {width} field(s); give it one "
                             "parameter per field", inner.location)
        width = stream_widths((inner,))[0]


def check_callable(pipeline: PipelineIR) -> None:
    """What only a pipeline about to run must satisfy: a map that starts it takes one argument, and a reduce or
    scan that starts it combines single values (a map of k arguments or a reduce/scan on k-tuples is a fragment,
    to be composed after a stage returning a k-tuple)."""
    first = pipeline.stages[0]
    if isinstance(first, Attach) and entering_width(first.pipeline) != 1:
        k = entering_width(first.pipeline)
        raise ArityError(f"this attach's pipeline takes a {k}-tuple stream, but as the first stage it gets one "
                         f"input, and an attached pipeline brings in no input of its own; zip the inputs before "
                         f"it (a zip_with returning a {k}-tuple)", first.location)
    if isinstance(first, (Reduce, Scan)) and len(first.op.outputs) > 1:
        k = len(first.op.outputs)
        kind = "reduce" if isinstance(first, Reduce) else "scan"
        raise ArityError(f"this {kind}'s operator {first.op.name!r} combines {k}-tuples, but as the first stage it "
                         f"gets one input; put a map or zip_with returning a {k}-tuple before it "
                         f"(tc.zip_with(lambda {', '.join(f'x{j}' for j in range(k))}: "
                         f"({', '.join(f'x{j}' for j in range(k))})) takes {k} inputs)", first.location)
    if isinstance(first, Map) and first.fn.arity != 1:
        raise ArityError(f"map's function {first.fn.name!r} takes {first.fn.arity} arguments, but as the first stage "
                         "map passes one element; put it after a stage that returns a "
                         f"{first.fn.arity}-tuple, or use zip_with for functions of several inputs", first.location)


def iteration_axes(stage: Reduce | Scan | None, rank: int) -> tuple[int, ...]:
    """The reduced or scanned dimensions of a rank-``rank`` iteration space, checked and non-negative."""
    if stage is None:
        return ()
    axes = (stage.axis,) if isinstance(stage, Scan) else stage.axis
    if axes is None or (isinstance(stage, Reduce) and len(axes) == 0):
        return tuple(range(rank))
    bound = max(rank, 1)
    seen: list[int] = []
    for a in axes:
        if not -bound <= a < bound:
            kind = "scan" if isinstance(stage, Scan) else "reduce"
            raise AxisError(f"{kind} axis {a} is out of range for a stream of rank {rank}; use an axis in "
                            f"[{-bound}, {bound - 1}]", stage.location)
        a = a % bound
        if a in seen:
            raise AxisError(f"reduce axis {a} is repeated in axis={axes}; name each axis once", stage.location)
        seen.append(a)
    return tuple(sorted(a for a in seen if a < rank))
