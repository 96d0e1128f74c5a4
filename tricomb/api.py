"""The Python API: stage constructors, ``>>`` composition, and calling a pipeline on tensors."""
from __future__ import annotations

import builtins
import functools
import math
import numbers
import sys

import torch

from .errors import (ArgumentError, AxisError, DTypeError, TricombError, UnsupportedError, caller_location,
                     too_deeply_nested)
from .codegen.strategies import describe, strategy_for
from .lower.fuse import KernelPlan
from .pipeline.ir import Attach, Map, PipelineIR, Reduce, Scan, ZipWith
from .pipeline.operators import normalized_identity
from .pipeline.printer import pipeline_text, scalar_names
from .pipeline.scalars import HOLDS, KIND_NAMES, Parameter, is_number, merged_parameters, number_kind, plain_scalar
from .pipeline.shorthands import SHORTHANDS, Shorthand
from .pipeline.verify import operator_spec, verify
from .runtime import foreach as foreach_runtime
from .runtime import launch, operator
from .scalar.derivatives import define_jit_vjp
from .scalar.ir import Arg, Call, Function, JitCall, JitRef, walk
from .scalar.trace import BUILTINS, Traced, is_jit_function, to_function


class Plan:
    """What ``pipe.explain(x)`` returns: ``str(plan)`` is readable; ``plan.num_kernels`` counts kernels.
    ``plan.passes`` holds ``(pass name, text of the IR after it)`` for each compiler pass, when asked for
    (``explain(x, passes=True)``), else is empty. When an input explained requires grad, ``plan.backward`` holds
    a Plan for each kernel a backward runs, or, for a pipeline whose gradient is not derived, is empty and
    ``plan.backward_refused`` says why (the message a call with grad would raise)."""

    def __init__(self, kernel_plan: KernelPlan, passes: tuple[tuple[str, str], ...] = (), chosen: tuple[str, ...] = (),
                 backward: tuple["Plan", ...] = (), backward_refused: str | None = None):
        self.kernel_plan = kernel_plan
        self.passes = passes
        self.chosen = chosen  # what the launch chooses for the inputs explained (lines), where it chooses a plan
        self.backward = backward
        self.backward_refused = backward_refused

    @property
    def num_kernels(self) -> int:
        return self.kernel_plan.num_kernels

    @property
    def kind(self) -> str:
        return strategy_for(self.kernel_plan).name

    @property
    def backward_kernels(self) -> int:
        """The number of kernels a backward runs (0 when no input explained requires grad)."""
        return len(self.backward)

    def __str__(self) -> str:
        if not self.passes:
            lines = [describe(self.kernel_plan), *self.chosen]
            if self.backward:
                lines.append(f"backward: {len(self.backward)} kernel(s)")
                for k, plan in enumerate(self.backward, 1):
                    lines += [f"  backward kernel {k}: {pipeline_text(plan.kernel_plan.written)}",
                              *("    " + line for line in describe(plan.kernel_plan).splitlines())]
            if self.backward_refused is not None:
                lines.append(f"backward: none (a call with grad raises UnsupportedError: {self.backward_refused})")
            return "\n".join(lines)
        return "\n\n".join(f"=== after {name} ===\n{text}" for name, text in self.passes)

    __repr__ = __str__


def _nesting_refused(method):
    """``method``, raising :func:`too_deeply_nested`'s UnsupportedError instead of a RecursionError."""
    @functools.wraps(method)
    def guarded(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except RecursionError:
            raise too_deeply_nested() from None
    return guarded


_DTENSORS = "torch.distributed.tensor"  # (no DTensor exists before this module is imported)
DTENSOR_CALLS: list = []  # the call on DTensor inputs, set when tricomb.distributed (a layer above) is imported


def is_dtensor(value) -> bool:
    """Whether ``value`` is a DTensor (read by name: DTensor is not imported for plain tensors)."""
    return type(value).__name__ == "DTensor" and isinstance(value, torch.Tensor)


class Pipeline:
    """A composition of stages that compiles to one Triton kernel per input layout.

    ``pipe(*tensors, out=None)`` takes one tensor per input (CUDA, or CPU through Triton's interpreter) and
    returns a tensor with torch's dtype and shape for the same computation. Compose with ``>>``.
    """

    __slots__ = ("ir", "parameters", "_cache", "_named", "_key", "_form_key")

    def __init__(self, ir: PipelineIR, parameters: tuple[Parameter, ...] = ()):
        self.ir = verify(ir)
        self.parameters = parameters  # the runtime scalars it names, by index (a parsed param, a number in env)
        self._cache = launch.PipelineCache(self.ir, len(parameters))
        self._named = _named_result(self.ir)
        self._key = operator.key_function(self.ir, self._cache)
        self._form_key = operator.form_key_function(self._cache)

    def with_parameters(self, parameters: tuple[Parameter, ...]) -> "Pipeline":
        """This pipeline, naming the runtime scalars ``parameters`` (which its IR reads by index)."""
        return Pipeline(self.ir, parameters) if parameters else self

    def __rshift__(self, other: "Pipeline") -> "Pipeline":
        if not isinstance(other, Pipeline):
            raise ArgumentError(f"a pipeline can only be composed (>>) with another pipeline or stage, not "
                               f"{type(other).__name__} {other!r}; wrap functions in tc.map(...)", caller_location())
        parameters, right = merged_parameters(self.parameters, other.parameters, other.ir)
        return Pipeline(PipelineIR(self.ir.stages + right.stages), parameters)

    def __or__(self, other):
        raise ArgumentError("in Python, compose stages with >> (| separates stages in the DSL text)",
                            caller_location())

    __ror__ = __or__

    def __rrshift__(self, other):
        raise ArgumentError(f"only pipelines compose with >>; {other!r} is not one. Wrap scalar functions in "
                            "tc.map(...) or tc.zip_with(...)", caller_location())

    def __call__(self, *inputs: torch.Tensor, out: torch.Tensor | None = None, **named) -> torch.Tensor:
        # (the launch path: its slow part refuses deep nesting itself, so a repeated call pays no wrapper)
        if _DTENSORS in sys.modules and builtins.any(is_dtensor(x) for x in inputs):
            return self._on_dtensors(inputs, out, named)
        given = self._given(named) if named or self.parameters else ()
        if torch.compiler.is_compiling():  # (first: torch.compile traces this branch alone)
            key, tensors, scalars = self._operator_call(inputs, given)
            result = operator.traced_call(key, tensors, out, scalars)
        else:
            graph = functools.partial(self._through_operator, given=given) if given else self._through_operator
            result = launch.run(self.ir, self._cache, inputs, out, graph, given)
        return result if self._named is None else self._named(result)

    def _on_dtensors(self, inputs: tuple, out, named: dict):
        """The call on DTensors: each rank's kernels on its shard, a gather per fold (:mod:`tricomb.distributed`)."""
        if not DTENSOR_CALLS:
            raise UnsupportedError("DTensor inputs are taken once tricomb.distributed is imported: add "
                                   "`import tricomb.distributed`", caller_location())
        if out is not None:
            raise UnsupportedError("out= is not taken with DTensor inputs: the result is a new DTensor; copy it "
                                   "into your buffer after the call", caller_location())
        return DTENSOR_CALLS[0](self, inputs, named)

    def _given(self, named: dict) -> tuple:
        """The values of the runtime scalars the pipeline names, from a call's keywords (else their defaults).
        Raises ArgumentError for a keyword naming none of them and for one given no value."""
        unknown = [k for k in named if k not in {p.name for p in self.parameters}]
        if unknown and not self.parameters:
            raise ArgumentError(f"a pipeline takes its inputs by position, not as {', '.join(k + '=' for k in unknown)}"
                                "; call pipe(x, y) (out= is the one keyword; a parsed pipeline's param names are "
                                "keywords too)", caller_location())
        if unknown:
            names = ", ".join(p.name + "=" for p in self.parameters)
            raise ArgumentError(f"{unknown[0]}= names no runtime scalar of this pipeline ("
                                + (f"it names {names}" if names else "it names none: its inputs are by position")
                                + "; out= is the other keyword)", caller_location())
        values = []
        for p in self.parameters:
            value = named.get(p.name, p.default)
            if value is None:
                raise ArgumentError(f"{p.name}= is not given: the pipeline reads the runtime scalar {p.name} (a "
                                    f"{p.kind.__name__}), given by keyword at each call, never by position (a "
                                    f"number by position is one of the inputs); call pipe(..., {p.name}=value)",
                                    caller_location())
            values.append(_parameter_value(p, value))
        return tuple(values)

    def _through_operator(self, inputs: tuple, out, given: tuple = ()):
        """The call path for inputs that need a graph (grad, or a tracer's): the torch operator."""
        key, tensors, scalars = self._operator_call(inputs, given)
        return operator.call(key, tensors, out, tuple(plain_scalar(v, "a runtime scalar") for v in scalars))

    def _operator_call(self, inputs: tuple, given: tuple = ()) -> tuple:
        """The operator's key for a call on ``inputs``, its tensors and its runtime scalars (``given``, the named
        ones' values, first): with numbers among the inputs, those of the pipeline reading them as runtime
        scalars (:class:`~tricomb.runtime.launch.ScalarForm`)."""
        if builtins.all(isinstance(t, torch.Tensor) for t in inputs):
            return self._key, inputs, given
        kinds = tuple(None if isinstance(t, torch.Tensor) else number_kind(t, i) for i, t in enumerate(inputs))
        key = self._form_key(kinds)
        tensors = tuple(t for t in inputs if isinstance(t, torch.Tensor))
        return lambda: key, tensors, (*given, *(t for t in inputs if not isinstance(t, torch.Tensor)))

    def _for_inputs(self, inputs: tuple) -> tuple[PipelineIR, tuple]:
        """The pipeline and tensors that inputs like ``inputs`` run (numbers among them read as runtime
        scalars), for :meth:`source` and :meth:`explain`."""
        if builtins.all(isinstance(t, torch.Tensor) for t in inputs):
            return self.ir, inputs
        form = self._cache.form(inputs)
        return form.ir, form.split(inputs)[0]

    @_nesting_refused
    def source(self, *inputs: torch.Tensor, backward: bool = False) -> str:
        """The emitted module (Python source) for inputs like ``inputs``: it defines ``launch(*inputs)``. With
        ``backward=True``, the modules of the kernels a backward runs for the gradients of the inputs that
        require grad (of every float input, when none does), one after another, each headed by a comment naming
        its pipeline (each is a module of its own). Raises UnsupportedError where no gradient is derived."""
        if not isinstance(backward, bool):
            raise ArgumentError(f"backward={backward!r}: give True or False", caller_location())
        ir, inputs = self._for_inputs(inputs)
        if not backward:
            return launch.emit_source(ir, inputs)
        kernels = operator.backward_kernels(ir, inputs)
        return "\n\n".join(f"# ---- backward kernel {k} of {len(kernels)}: {pipeline_text(ir)}\n"
                             + launch.emit_source(ir, tensors) for k, (ir, tensors) in enumerate(kernels, 1))

    @_nesting_refused
    def explain(self, *inputs: torch.Tensor, passes: bool = False) -> Plan:
        """The kernel plan for inputs like ``inputs``; with ``passes=True``, also the IR after each compiler pass,
        up to the emitted module (:data:`tricomb.compiler.PASSES`), which ``str(plan)`` then shows. When an input
        requires grad, also the plans of the kernels a backward runs (``plan.backward``, shown after the
        forward's): derived without running them, allocating the tensors between them."""
        if not isinstance(passes, bool):
            raise ArgumentError(f"passes={passes!r}: give True or False", caller_location())
        record: list = []
        ir, inputs = self._for_inputs(inputs)
        unit = launch.lowered(ir, inputs, until="emit" if passes else "fuse", record=record if passes else None)
        grad = builtins.any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)
        backward, refused = (), None
        try:
            backward = tuple(Plan(launch.lowered(derived, tensors).plan) for derived, tensors in
                             operator.backward_kernels(ir, inputs)) if grad else ()
        except UnsupportedError as exc:
            refused = exc.message
        return Plan(unit.plan, tuple(record), tuple(_chosen(unit.plan, inputs)), backward, refused)

    @property
    def num_inputs(self) -> int:
        return self.ir.num_inputs

    def __eq__(self, other) -> bool:
        return isinstance(other, Pipeline) and other.ir == self.ir

    def __hash__(self) -> int:
        return hash(self.ir)

    @_nesting_refused
    def __str__(self) -> str:
        if not self.parameters:
            return pipeline_text(self.ir)
        declared = ", ".join((p.name if p.kind is float else f"{p.name}: {p.kind.__name__}")
                             + ("" if p.default is None else f" = {_written(p.default)}") for p in self.parameters)
        with scalar_names({p.index: p.name for p in self.parameters}):
            return f"param {declared}; {pipeline_text(self.ir)}"

    def __repr__(self) -> str:
        return f"<tricomb pipeline: {self}>"


def _written(value) -> str:
    """A parameter's value as the text form writes it (``inf`` and ``nan`` as the text names them)."""
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"
    return repr(value)


def _parameter_value(p: Parameter, value):
    """``value`` given for the named runtime scalar ``p``, as a number of its kind: a kind it holds exactly (an
    int for a float parameter, a bool for an int one), never one it would round (ArgumentError)."""
    if torch.compiler.is_compiling() and not isinstance(value, torch.Tensor):  # (a tracer's number: as it is)
        kind = KIND_NAMES[number_kind(value, 0)]
        plain = value
    elif is_number(value):
        if p.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)  # (an int a float scalar holds, however large)
        plain = plain_scalar(value, f"{p.name}=")
        kind = type(plain)
    else:
        raise ArgumentError(f"{p.name}= is a {type(value).__name__}; give a number (a {p.kind.__name__}): a param "
                            "is a number given at each call (a value on the device is a tensor input of the "
                            "pipeline instead)", caller_location())
    if kind not in HOLDS[p.kind]:
        raise ArgumentError(f"{p.name}= is a {kind.__name__}, but the runtime scalar {p.name} is a "
                            f"{p.kind.__name__} (declared so, or the kind of its value in env), which would change "
                            f"it; give a {p.kind.__name__}, or declare param {p.name}: {kind.__name__}",
                            caller_location())
    return plain if kind is p.kind or torch.compiler.is_compiling() else p.kind(plain)


def _chosen(plan: KernelPlan, inputs: tuple) -> list[str]:
    """What the launch chooses for ``inputs`` (:meth:`~tricomb.codegen.strategies.KernelStrategy.chosen`)."""
    joining = [t for t, slot in zip(inputs, plan.inputs) if slot.phase == 0] or list(inputs[:1])
    shape = tuple(torch.broadcast_shapes(*(t.shape for t in joining)))
    x = inputs[0].expand(shape) if shape else inputs[0]
    axes = plan.binding.axes
    inner = not axes or x.stride(axes[-1]) == 1
    device = inputs[0].device
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 0
    from .codegen.host import _shared_mem  # (the emitted modules' own reading of the device)
    return strategy_for(plan).chosen(shape, inner, device.type != "cuda", sms, _shared_mem(device))


def build_map(f, where) -> Pipeline:
    return Pipeline(PipelineIR((Map(to_function(f, role="map's function", location=where), where),)))


def build_zip_with(g, where, constant_along=None) -> Pipeline:
    fn = to_function(g, role="zip_with's function", location=where)
    return Pipeline(PipelineIR((ZipWith(fn, where, _axes_tuple(constant_along, "zip_with's constant_along", where)),)))


def _axes_tuple(axes, name: str, where) -> tuple[int, ...]:
    """``axes`` (None, an int or a tuple of ints) as a tuple; ArgumentError naming ``name`` otherwise."""
    if axes is None:
        return ()
    given = axes if isinstance(axes, tuple) else (axes,)
    if builtins.any(type(a) is not int for a in given):
        raise ArgumentError(f"{name} must be an int or a tuple of ints (axes of the stream), got {axes!r}", where)
    return given


def _named_result(ir: PipelineIR):
    """torch's named pair type for a pipeline ending in cummax/cummin (values, indices), else None."""
    last = ir.stages[-1]
    if not (isinstance(last, Scan) and last.index):
        return None
    return torch.return_types.cummax if operator_spec(last.op).name == "maximum" else torch.return_types.cummin


def _depends_on_its_operands(fn: Function, kind: str, where) -> Function:
    """A reduce or scan operator with a result field that reads none of its operands (a constant) has nothing to
    combine: refused, with what to write instead."""
    for k, out in enumerate(fn.outputs):  # (builtins.any: this module defines tc.any)
        if not builtins.any(isinstance(e, (Arg, JitCall)) for e in walk(out)):
            raise UnsupportedError(f"{kind}'s operator returns a constant{'' if len(fn.outputs) == 1 else f' in field {k}'}"
                                   f", which reads neither operand, so the {kind} has nothing to combine; a "
                                   "constant result is a map (tc.map(lambda x: c))", where)
    return fn


def build_reduce(op, axis, keepdim, mean: bool, where, dtype=None, index: bool = False,
                 skip_nan: bool = False, identity=None) -> Pipeline:
    fn = _depends_on_its_operands(to_function(op, role="reduce's operator", location=where), "reduce", where)
    if not isinstance(keepdim, bool):
        raise ArgumentError(f"keepdim must be True or False, got {keepdim!r}", where)
    stage = Reduce(fn, _axes(axis, where), keepdim, mean, _dtype(dtype, where), index, skip_nan,
                   normalized_identity(identity, where), where)
    return Pipeline(PipelineIR((stage,)))


def build_scan(op, axis, where, dtype=None, reverse: bool = False, exclusive: bool = False,
               identity=None, index: bool = False) -> Pipeline:
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise AxisError(f"scan's axis must be an int, got {axis!r}", where)
    for name, flag in (("reverse", reverse), ("exclusive", exclusive)):
        if not isinstance(flag, bool):
            raise ArgumentError(f"{name} must be True or False, got {flag!r}", where)
    fn = _depends_on_its_operands(to_function(op, role="scan's operator", location=where), "scan", where)
    identity = normalized_identity(identity, where)
    stage = Scan(fn, int(axis), _dtype(dtype, where), reverse, exclusive, identity, where, index)
    return Pipeline(PipelineIR((stage,)))


def _dtype(dtype, where) -> torch.dtype | None:
    """A reduce/scan ``dtype=``: None, a supported torch.dtype, or its name (``"bfloat16"``)."""
    from .lower.bind import SUPPORTED_DTYPES
    named = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if dtype is None or named in SUPPORTED_DTYPES:
        return named
    names = ", ".join(str(d)[6:] for d in SUPPORTED_DTYPES)
    raise DTypeError(f"dtype={dtype!r} is not a dtype tricomb handles; pass one of {names} (a torch.dtype or its "
                     "name)", where)


def _axes(axis, where) -> tuple[int, ...] | None:
    if axis is None:
        return None
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    for a in items:
        if isinstance(a, bool) or not isinstance(a, numbers.Integral):
            raise AxisError(f"axis must be None, an int or a tuple of ints; got {axis!r}", where)
    return tuple(int(a) for a in items)


def map(f) -> Pipeline:  # noqa: A001 - the field's name for it
    """``map(f)``: apply the one-argument scalar function ``f`` to every element.

    ``f`` is a builtin (``tc.exp``), a Python def or lambda over builtins and operators (traced), or a
    ``@triton.jit`` function (copied into the kernel). Raises :class:`TraceError` or :class:`ArityError`.
    """
    return build_map(f, caller_location())


def zip_with(g, constant_along=None) -> Pipeline:
    """``zip_with(g)``: combine elementwise, after broadcasting by torch's rules.

    As the first stage, ``g``'s k arguments take the pipeline's first k inputs; later, the stream is its first
    argument and each further argument adds an input to the pipeline. ``constant_along`` (an axis or a tuple of
    axes of the stream): each input this stage brings in must have size 1 along them, as a ``(N, 1)`` target
    beside ``(N, C)`` logits does; a call with one that does not (a ``(N,)`` target would broadcast along the
    other axis) raises :class:`ShapeError` before anything runs. Raises :class:`ArgumentError` for axes that are
    not ints.
    """
    return build_zip_with(g, caller_location(), constant_along)


def reduce(op, axis=None, keepdim: bool = False, dtype=None, identity=None, **others) -> Pipeline:  # noqa: A001
    """``reduce(op, axis=None, keepdim=False, dtype=None, identity=None)``: combine along ``axis`` (None or ``()``:
    all axes; an int or a tuple of ints) with the associative operator ``op``: a builtin (``tc.add``, ``tc.mul``,
    ``tc.maximum``, ``tc.minimum``, ``tc.logaddexp``, ...), or a function of two values with its ``identity``,
    whose laws are checked on a sample when the stage is built (:func:`tricomb.check_laws`; a reduce needs it to
    commute too).

    The result dtype is torch's for the matching reduction (``torch.sum``, ``torch.prod``, ``torch.amax``,
    ``torch.amin``); NaN propagates through maximum/minimum as in torch. ``dtype`` (add and mul only, as
    torch.sum/prod) converts the stream before combining and is the result's dtype. Raises :class:`AxisError`
    for a malformed axis, :class:`DTypeError` for an unknown dtype, :class:`UnsupportedError` for an operator
    that is not a builtin associative one or that takes no dtype.
    """
    _no_other_arguments("reduce", "op, axis=, keepdim=, dtype= and identity=", others)
    return build_reduce(op, axis, keepdim, False, caller_location(), dtype, identity=identity)


def scan(op, axis: int = -1, reverse: bool = False, exclusive: bool = False, dtype=None, identity=None,
         **others) -> Pipeline:
    """``scan(op, axis=-1, reverse=False, exclusive=False, dtype=None)``: prefix combine along ``axis`` (as
    ``torch.cumsum`` for ``tc.add``). ``reverse`` combines from the end (suffixes: ``flip``, scan, ``flip``);
    ``exclusive`` leaves each element out of its own result, so the first holds the operator's identity (the
    usual exclusive scan, as in G. E. Blelloch, "Prefix sums and their applications", CMU-CS-90-190, 1990).
    ``dtype`` as torch.cumsum's (add and mul only). ``op`` and ``identity`` as for :func:`reduce`; a scan keeps
    the order of its operands, so its operator need not commute. The result has the stream's shape."""
    _no_other_arguments("scan", "op, axis=, reverse=, exclusive=, dtype= and identity=", others)
    return build_scan(op, axis, caller_location(), dtype, reverse, exclusive, identity)


def fanout(*reduces: Pipeline) -> Pipeline:
    """``fanout(tc.sum(axis=1), tc.max(axis=1), ...)``: several reductions of one input in one pass, one kernel,
    returning a tuple with one tensor per reduction, each torch's (a sum of int32 is int64, a max keeps the dtype).

    Each argument is a reduce stage with a builtin operator (``sum``, ``prod``, ``max``, ``min``, ``any``,
    ``all``, or ``tc.reduce(builtin)``), all over the same ``axis`` and ``keepdim``, without ``dtype=``. It is the
    reduce of an operator on k-tuples that applies each builtin to its own field, after a map copying the
    input into every field. Raises :class:`UnsupportedError` for another stage and :class:`ArgumentError` for
    fewer than two or for different axes, naming the argument.
    """
    where = caller_location()
    if len(reduces) < 2:
        raise ArgumentError(f"fanout takes two or more reduce stages, got {len(reduces)}", where)
    stages = []
    for k, pipe in enumerate(reduces):
        stage = pipe.ir.stages[0] if isinstance(pipe, Pipeline) and len(pipe.ir.stages) == 1 else None
        spec = operator_spec(stage.op) if isinstance(stage, Reduce) else None
        if spec is None or spec.identity is None or stage.mean or stage.index or stage.skip_nan or stage.dtype:
            raise UnsupportedError(f"fanout's argument {k} ({pipe}) is not a reduce stage with a builtin operator and "
                                   "no "
                               "dtype=; pass sum, prod, max, min, any, all or tc.reduce(builtin) stages (for a mean, "
                               "fan out the sum and divide after)", where)
        if stages and (stage.axis, stage.keepdim) != (stages[0].axis, stages[0].keepdim):
            raise ArgumentError(f"fanout's argument {k} reduces axis={stage.axis}, keepdim={stage.keepdim}, but "
                               f"argument 0 axis={stages[0].axis}, keepdim={stages[0].keepdim}; one pass reduces "
                               "the same axes", where)
        stages.append(stage)
    n = len(stages)
    specs = [operator_spec(s.op) for s in stages]
    # anonymous functions print as lambdas, so str() of a fanout parses back to the same pipeline
    op = Function(2 * n, tuple(Call(spec.name, (Arg(j), Arg(n + j))) for j, spec in enumerate(specs)), "<lambda>",
                  where)
    copies = Function(1, (Arg(0),) * n, "<lambda>")
    reduce_ = Reduce(op, stages[0].axis, stages[0].keepdim, identity=tuple(spec.identity for spec in specs),
                     location=where)
    return Pipeline(PipelineIR((Map(copies, where), reduce_)))


class Foreach:
    """``tc.foreach(pipe)``: the pipeline ``pipe`` (maps and zip_withs) applied to lists of tensors, position by
    position, in one kernel launch per group of positions (one device and one dtype at each argument, as torch's
    foreach ops group them).

    ``foreach(*arguments, out=None, **named)``: each argument is a list of tensors (one per position; the tensors of
    one position have one shape), a number (a runtime scalar, shared), a list of numbers (one per position), or a
    0-d tensor (shared; a value on the device that changes without a host sync, such as a scheduled learning
    rate). ``out``: lists of tensors for the result fields (a list, or a tuple of lists for a tuple result),
    each tensor written in place over the input it is exactly, if any. Returns the result lists (``out``'s).
    ``named``: the runtime scalars a parsed pipeline names (``param``).

    The launch reads a table of the tensors' addresses and sizes that is kept for the same tensors, so repeated
    steps over the same parameters copy nothing to the device and can be captured in a CUDA graph. Contiguous
    tensors take the one launch; a position with a strided tensor is a call of the pipeline of its own. Raises
    UnsupportedError for a pipeline with a reduce, scan or attach, or inputs that require grad in grad mode;
    ArgumentError, ShapeError, DTypeError and AliasError (a result over part of an input) naming the argument,
    before anything runs.
    """

    __slots__ = ("pipeline", "_runner", "_key")

    def __init__(self, pipeline: Pipeline):
        if not isinstance(pipeline, Pipeline):
            raise ArgumentError(f"tc.foreach takes a pipeline (tc.zip_with(...), tc.parse(...)), not "
                                f"{type(pipeline).__name__}", caller_location())
        foreach_runtime.check_elementwise(pipeline.ir, caller_location())
        self.pipeline = pipeline
        self._runner = foreach_runtime.ForeachRunner(pipeline.ir, len(pipeline.parameters))
        self._key = foreach_runtime.key_function(self._runner)

    def __call__(self, *arguments, out=None, **named):
        given = self.pipeline._given(named) if named or self.pipeline.parameters else ()
        if torch.compiler.is_compiling():
            return foreach_runtime.traced_call(self._key, self._runner, arguments, out, given)
        return self._runner(arguments, out, given)

    def __repr__(self) -> str:
        return f"<tricomb foreach: {self.pipeline}>"


def foreach(pipe: Pipeline) -> Foreach:
    """``pipe`` (maps and zip_withs) over lists of tensors in one launch per dtype group: see :class:`Foreach`."""
    return Foreach(pipe)


def build_attach(reduction, where) -> Pipeline:
    if not isinstance(reduction, Pipeline):
        raise ArgumentError(f"tc.attach takes a pipeline ending in a reduce (tc.max(axis=-1), "
                            f"tc.map(tc.square) >> tc.mean(axis=-1), a library reduction), not "
                            f"{type(reduction).__name__}", where)
    return Pipeline(PipelineIR((Attach(reduction.ir, where),)), reduction.parameters)


def attach(reduction: Pipeline) -> Pipeline:
    """``attach(P)``: the stream continues element by element, with the result fields of the reduction ``P``
    over it appended, each broadcast back along the axes ``P`` reduces (the shape ``keepdim=True`` keeps, then
    expanded): a later stage receives the stream's fields, then ``P``'s. Softmax along rows is
    ``tc.attach(tc.max(axis=-1)) >> tc.map(lambda v, m: tc.exp(v - m)) >> tc.attach(tc.sum(axis=-1)) >>
    tc.map(lambda e, s: e / s)``; it runs as one kernel, which reads each row once when it fits on chip.

    ``P`` is maps (and zip_withs of only the stream's fields), one reduce, and maps after it; it brings in no
    input of its own, and holds no scan. Every attach of a pipeline, and a reduce after them, reduce the same
    axes. Raises :class:`ArgumentError` for a ``P`` that is no pipeline, :class:`UnsupportedError` for one that
    is not such a reduction, or for a scan or a reduce before the attach."""
    return build_attach(reduction, caller_location())


def _no_other_arguments(name: str, allowed: str, extra: dict) -> None:
    if extra:
        wrong = ", ".join(f"{k}=" for k in extra)
        raise ArgumentError(f"tc.{name} takes {allowed}, not {wrong}" + (" (torch's dim is axis here)"
                           if "dim" in extra else ""), caller_location())


def _shorthand(spec: Shorthand):
    """``tc.sum``, ``tc.cumsum``, ...: the stage constructor of one row of the shorthand table."""
    allowed = ("axis=, keepdim=" if spec.kind == "reduce" else "axis=, reverse=, exclusive=") + \
        (" and dtype=" if spec.takes_dtype else "")

    def stage(axis=None if spec.kind == "reduce" else -1, keepdim: bool = False, dtype=None, reverse: bool = False,
              exclusive: bool = False, **extra) -> Pipeline:
        if spec.kind == "scan" and keepdim is not False:
            extra["keepdim"] = keepdim
        if spec.kind == "reduce":
            extra.update({k: v for k, v in (("reverse", reverse), ("exclusive", exclusive)) if v is not False})
        if dtype is not None and not spec.takes_dtype:
            extra["dtype"] = dtype
        _no_other_arguments(spec.name, allowed, extra)
        if spec.kind == "reduce":
            return build_reduce(BUILTINS[spec.op], axis, keepdim, spec.mean, caller_location(), dtype, spec.index,
                                spec.skip_nan)
        return build_scan(BUILTINS[spec.op], axis, caller_location(), dtype, reverse, exclusive, index=spec.index)

    stage.operator = spec.op  # marks a stage shorthand: passing it where an operator belongs gets a pointed error
    stage.__name__ = stage.__qualname__ = spec.name
    args = "axis=None, keepdim=False" if spec.kind == "reduce" else "axis=-1, reverse=False, exclusive=False"
    stage.__doc__ = (f"``{spec.name}({args}{', dtype=None' if spec.takes_dtype else ''})``: the "
                     f"{spec.kind} stage of {spec.torch_name}"
                     f"{' (dtype= as torch' + chr(39) + 's)' if spec.takes_dtype else ''}.")
    return stage


# the public stage constructors, one per row of the shorthand table, in the table's order (a test checks that
# each name is bound to its own row)
(sum, prod, max, min, mean, nansum, nanmean, argmax, argmin, any, all,  # noqa: A001
 cumsum, cumprod, cummax, cummin) = (_shorthand(spec) for spec in SHORTHANDS.values())


def vjp(fn):
    """Give the ``@triton.jit`` function ``fn`` a derivative, for the gradients of pipelines that call it::

        @tc.vjp(my_tanh)
        def _(x, y, g):      # its operands, its result, the cotangent of its result
            return g * (1.0 - y * y)

    The decorated Python function works over tc's builtins, as a map's function does, and returns each
    operand's share of the cotangent (a tuple for several operands; None for one that gets no gradient). It
    replaces the derivative tricomb reads from ``fn``'s body, which needs a body of builtins only. The rule
    holds for every pipeline, built before or after; returns the decorated function unchanged.

    Raises :class:`~tricomb.ArgumentError` when ``fn`` is not a ``@triton.jit`` function, or the rule does not
    take ``fn``'s operands, its result and the cotangent, or returns other than one share per operand."""
    where = caller_location()
    if not is_jit_function(fn):
        raise ArgumentError(f"tc.vjp takes the @triton.jit function to give a derivative, got {fn!r}; a Python "
                            "function over tc's builtins needs none (tricomb differentiates it)", where)
    arity = to_function(fn, role="tc.vjp's function", location=where).arity

    def register(rule):
        _check_vjp_rule(rule, fn.fn.__name__, arity, where)
        define_jit_vjp(JitRef(fn), rule)
        return rule
    return register


def _check_vjp_rule(rule, name: str, arity: int, where) -> None:
    """Trace ``rule`` once on placeholders, so a wrong rule fails where it is given, not in a backward."""
    wants = f"{arity + 2} arguments ({arity} operand(s) of {name}, its result, the cotangent)"
    if not callable(rule):
        raise ArgumentError(f"tc.vjp({name}) decorates a function of {wants}, got {rule!r}", where)
    try:
        shares = rule(*(Traced(Arg(i)) for i in range(arity + 2)))
    except TypeError as exc:
        raise ArgumentError(f"tc.vjp({name})'s rule must take {wants}: {exc}", where) from None
    except TricombError:
        raise
    except Exception as exc:  # the rule's own failure, on values that only stand for the operands
        raise ArgumentError(f"tc.vjp({name})'s rule raised {type(exc).__name__}: {exc} when traced on its "
                            f"{wants}; write it over tc's builtins, as a map's function", where) from None
    shares = shares if isinstance(shares, tuple) else (shares,)
    if len(shares) != arity or not builtins.all(s is None or isinstance(s, (Traced, numbers.Real)) for s in shares):
        raise ArgumentError(f"tc.vjp({name})'s rule must return one share per operand ({arity}: a value of tc's "
                            f"builtins, a number or None), got {shares!r}", where)
