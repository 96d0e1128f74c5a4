"""Runtime scalars: Python numbers given to a pipeline at each call, which reach its kernel as arguments.

A pipeline input may be a Python number (or a numpy scalar) instead of a tensor. Such an input is not a tensor
the kernel loads: :func:`with_runtime_scalars` rewrites every read of it, in the function of the stage that
brings it in, into the op table's ``runtime_<kind>`` op (kind ``bool``, ``int`` or ``float``) of its index among
the pipeline's runtime scalars, and drops it from the stage's inputs. The value takes no part in the IR, so a
new value never re-emits or recompiles a kernel: the launch passes it as kernel arguments, exactly (a float as
the two 32-bit halves of its double, an int as those of its int64, so that Triton's type for them is one
whatever the value, and a value of 1 or a multiple of 16 is not specialized on).

Promotion follows torch's rule for Python scalars (a *weak* scalar): ``x * 0.5`` keeps a float16 ``x``
float16, ``x + 3`` keeps an int8 ``x`` int8, a float meeting an integer tensor gives torch's default dtype.
The op's torch function gives a number of the scalar's kind, so the dtype passes (torch on meta tensors) see
exactly what torch sees; the kernel converts the value as torch converts a Python number (a float to a
float32 tensor's dtype rounded once; an int wrapped into an int8 tensor's range).

A 0-d tensor is an input like any other (torch promotes it as a 0-d tensor, not as a weak scalar): the form for a
value that lives on the device, such as a learning rate a scheduler updates without a host sync.
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

import torch

from ..errors import ArgumentError, DTypeError, caller_location
from ..scalar.builtins import OPS
from ..scalar.ir import Arg, Call, Const, Function, as_expr, fold, rebuilt, substitute, walk
from ..scalar.literals import NotExact, number_key, plain_number
from .ir import Attach, Map, PipelineIR, ZipWith, new_inputs, stream_widths

KINDS = (bool, int, float)
KIND_NAMES = {kind.__name__: kind for kind in KINDS}
# the torch dtype a runtime scalar of each kind is held in, in a kernel and in the oracle: its value exactly
CARRIERS = {bool: torch.bool, int: torch.int64, float: torch.float64}
# the kinds whose values a runtime scalar of each kind holds exactly (a float scalar takes an int; an int one no float)
HOLDS = {bool: (bool,), int: (bool, int), float: (bool, int, float)}


@dataclass(frozen=True)
class Parameter:
    """A runtime scalar a pipeline names (a parsed ``param``, or a number in ``env``): read as ``index``, a
    Python number of ``kind``, given at each call by ``name`` (``default`` when not given: None for none)."""

    name: str
    kind: type
    index: int
    default: bool | int | float | None = None
_INT64 = (-2**63, 2**63 - 1)


def runtime_op(kind: type) -> str:
    """The op table's name for a runtime scalar of ``kind``."""
    return f"runtime_{kind.__name__}"


def runtime_scalar(index: int, kind: type) -> Call:
    """The expression reading runtime scalar ``index``, of ``kind``."""
    return Call(runtime_op(kind), (Const(index),))


def is_number(value) -> bool:
    """Whether ``value`` is an input the pipeline takes as a runtime scalar: a Python or numpy bool, int or
    float (not a tensor, however small)."""
    if isinstance(value, (bool, int, float)):
        return True
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, (numpy.bool_, numpy.integer, numpy.floating))


def not_an_input(value, at: int) -> DTypeError:
    """The error for input ``at``, ``value``, which is neither a tensor nor a number."""
    return DTypeError(f"input {at} is a {type(value).__name__}, neither a torch.Tensor nor a number (a bool, int or "
                      "float: a runtime scalar); pass a tensor (torch.as_tensor(...)) or a number", caller_location())


def number_kind(value, at: int) -> str:
    """The name of the kind of runtime scalar the number ``value`` (input ``at``) is read as: by its type alone, so
    a tracer's number (a SymInt, a SymFloat, a constant torch.compile holds) has one too. Raises DTypeError
    (:func:`not_an_input`) for what is no number."""
    np = sys.modules.get("numpy")
    if isinstance(value, (bool, torch.SymBool)) or np is not None and isinstance(value, np.bool_):
        return "bool"
    if isinstance(value, (int, torch.SymInt)) or np is not None and isinstance(value, np.integer):
        return "int"
    if isinstance(value, (float, torch.SymFloat)) or np is not None and isinstance(value, np.floating):
        return "float"
    raise not_an_input(value, at)


def plain_scalar(value, what: str) -> bool | int | float:
    """``value`` (see :func:`is_number`) as the plain bool, int or float it equals. Raises ArgumentError, naming
    ``what``, for an int outside int64 (torch refuses it too) or a float no double equals."""
    try:
        plain = plain_number(value)
    except NotExact as exc:
        raise ArgumentError(f"{what} is {exc}; pass the float you mean", caller_location()) from None
    if type(plain) is int and not _INT64[0] <= plain <= _INT64[1]:
        raise ArgumentError(f"{what} is {plain}, outside int64 (a runtime scalar int is passed as one); pass a float, "
                            "or a tensor", caller_location())
    return plain


def used_scalars(pipeline: PipelineIR) -> tuple[tuple[int, type], ...]:
    """Each runtime scalar the pipeline's functions read: ``(index, kind)``, by index."""
    found = {}
    for fn in pipeline.functions:
        for node in walk(*fn.outputs):
            if isinstance(node, Call) and OPS[node.op].runtime is not None:
                found[node.args[0].value] = OPS[node.op].runtime
    return tuple(sorted(found.items()))


def with_runtime_scalars(pipeline: PipelineIR, kinds: tuple[type | None, ...], first: int = 0) -> PipelineIR:
    """``pipeline`` with each input whose kind in ``kinds`` is not None (one per input: None for a tensor) read
    as a runtime scalar of that kind, numbered from ``first`` in input order, and dropped from the inputs. Raises
    ArgumentError when no tensor is left for a stage that needs one (the first stage, or a reduce, scan or
    attach fed by an input)."""
    owners = [i for i, count in enumerate(new_inputs(pipeline.stages)) for _ in range(count)]
    widths = [0] + stream_widths(pipeline.stages)[:-1]
    numbers = iter(range(first, first + sum(k is not None for k in kinds)))
    stages = list(pipeline.stages)
    for at, stage in enumerate(pipeline.stages):
        taken = [i for i, owner in enumerate(owners) if owner == at]
        if not any(kinds[i] is not None for i in taken):
            continue
        if not isinstance(stage, (Map, ZipWith)) or all(kinds[i] is not None for i in taken) and at == 0:
            raise ArgumentError(f"input {taken[0]} is a number, but stage {at} needs a tensor there (a number is a "
                                "runtime scalar for a map or zip_with beside at least one tensor); pass a tensor "
                                "(torch.as_tensor)", caller_location())
        stages[at] = _rewritten(stage, widths[at], [kinds[i] for i in taken], numbers)
    return PipelineIR(tuple(stages), pipeline.column_sums)


def _rewritten(stage: Map | ZipWith, width: int, kinds: list[type | None], numbers) -> Map | ZipWith:
    """``stage``, whose new inputs have ``kinds``, reading its scalar ones as runtime scalars."""
    fn = stage.fn
    args: list = [Arg(j) for j in range(width)]
    kept = width
    renumbered = {}
    for j, kind in enumerate(kinds):
        if kind is None:
            renumbered[j] = kept - width
            args.append(Arg(kept))
            kept += 1
        else:
            args.append(runtime_scalar(next(numbers), kind))
    body = Function(kept, tuple(substitute(fn, args)), fn.name, fn.location)
    if kept == max(width, 1) or isinstance(stage, Map):
        return Map(body, stage.location)
    lags = tuple(type(lag)(renumbered[lag.input], lag.axis, lag.by, lag.fill) for lag in stage.lags
                 if lag.input in renumbered)
    return ZipWith(body, stage.location, stage.constant_along, lags)


def merged_parameters(left: tuple[Parameter, ...], right: tuple[Parameter, ...],
                      ir: PipelineIR) -> tuple[tuple[Parameter, ...], PipelineIR]:
    """The runtime scalars a composition ``left >> right`` names, and ``ir`` (``right``'s) reading its own by
    their indices there: a name both name is one scalar (the same kind; left's default first), a new one is
    numbered after ``left``'s. Raises ArgumentError for one name of two kinds."""
    merged = {p.name: p for p in left}
    moved = {}
    for p in right:
        found = merged.get(p.name)
        if found is not None and found.kind is not p.kind:
            raise ArgumentError(f"the composed pipelines both name the runtime scalar {p.name}, as a "
                                f"{found.kind.__name__} and as a {p.kind.__name__}; give them one kind, or two names",
                                caller_location())
        if found is not None and None not in (found.default, p.default) and \
                number_key(found.default) != number_key(p.default):
            raise ArgumentError(f"the composed pipelines both name the runtime scalar {p.name}, with the values "
                                f"{found.default!r} and {p.default!r} (from env); one name is one scalar: give them "
                                "one value, or two names", caller_location())
        if found is not None and found.default is None and p.default is not None:
            found = merged[p.name] = Parameter(found.name, found.kind, found.index, p.default)
        if found is None:
            found = merged[p.name] = Parameter(p.name, p.kind, len(merged), p.default)
        moved[p.index] = found.index
    if all(k == v for k, v in moved.items()):
        return tuple(merged.values()), ir
    return tuple(merged.values()), renumbered(ir, moved)


def renumbered(pipeline: PipelineIR, moved: dict[int, int]) -> PipelineIR:
    """``pipeline`` reading runtime scalar ``moved[i]`` where it read ``i``."""
    def function(fn: Function) -> Function:
        reads = {node: runtime_scalar(moved[node.args[0].value], OPS[node.op].runtime) for node in walk(*fn.outputs)
                 if isinstance(node, Call) and OPS[node.op].runtime is not None}
        if not reads:
            return fn
        outputs = fold(fn, [Arg(i) for i in range(fn.arity)],
                       lambda node, operands: reads.get(node) or rebuilt(node, operands))
        return Function(fn.arity, tuple(as_expr(o) for o in outputs), fn.name, fn.location)

    def stage(s):
        if isinstance(s, (Map, ZipWith)):
            return dataclasses.replace(s, fn=function(s.fn))
        if isinstance(s, Attach):
            return dataclasses.replace(s, pipeline=renumbered(s.pipeline, moved))
        return s
    return PipelineIR(tuple(stage(s) for s in pipeline.stages), pipeline.column_sums)


__all__ = ["CARRIERS", "HOLDS", "KIND_NAMES", "KINDS", "Parameter", "not_an_input", "number_kind", "is_number", "plain_scalar", "runtime_op", "merged_parameters", "renumbered", "runtime_scalar", "used_scalars",
           "with_runtime_scalars"]
