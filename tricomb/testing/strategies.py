"""Hypothesis strategies for tricomb: random pipelines and the tensors they run on.

``pipelines_and_inputs()`` draws a pipeline of maps and zip_withs with at most one reduce or scan, together
with input tensors whose shapes broadcast correctly (rank 0 to 3, sizes 0 and 1 and non-powers of 2 included),
dtypes (float16, bfloat16, float32, float64, sometimes an integer input mixed in), layouts (transposed,
permuted, stepped, offset, expanded views) and values (including NaN, infinities and signed zeros).

The random float functions are continuous: a function with jumps (floor, sign, comparisons) can turn a one-ulp
difference into a large one, which says nothing about the kernel; those are checked on exact inputs by the
builtin table's own tests.

``integer_pipelines_and_inputs()`` draws pipelines over integer and bool tensors from operations that are exact
on them (add, sub, mul, maximum, minimum, neg, abs, affine maps with integer constants, comparisons and where),
with sum/prod/max/min reductions or cumsum/cumprod/cummax/cummin scans. Integer arithmetic wraps in the
operation's dtype exactly as torch's does (sums and products wrap in int64, which is still exact: wrapping
arithmetic is associative), so their results are compared for equality with torch evaluating the same
pipeline in the input dtypes (:func:`tricomb.pipeline.evaluate.evaluate`). A zip_with may bring in an input of
another integer dtype, or a float one; once the stream is floating, only continuous operations follow.

The building blocks are public: :func:`dtypes`, :func:`shapes`, :func:`tensors` (values valid for every
dtype), :func:`laid_out` (every dtype, 0-d and 0-size tensors too) and :func:`broadcastable`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from .. import api
from ..scalar.trace import BUILTINS

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
BOOL_DTYPES = (torch.bool,)
INTEGRAL_DTYPES = INT_DTYPES + BOOL_DTYPES  # integers and bool: arithmetic on them is exact
ALL_DTYPES = FLOAT_DTYPES + INTEGRAL_DTYPES  # every dtype tricomb supports

# unary builtins that are continuous where defined (NaN outside the domain is fine: torch agrees)
SMOOTH_UNARY = ("abs", "neg", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "square",
                "reciprocal", "sin", "cos", "tanh", "sigmoid", "softplus", "relu", "gelu", "gelu_tanh", "silu",
                "erf")
SMOOTH_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
REDUCTIONS = ("sum", "prod", "max", "min", "mean", "nansum", "nanmean")
INT_REDUCTIONS = ("sum", "prod", "max", "min")  # torch's mean refuses integer and bool tensors
SCANS = ("cumsum", "cumprod", "cummax", "cummin")
_SLOW_IN_INTERPRETER = ("cummax", "cummin")  # folded element by element by Triton's interpreter


@dataclass(frozen=True)
class Case:
    """A drawn pipeline and its inputs."""

    pipeline: api.Pipeline
    inputs: tuple[torch.Tensor, ...]

    def __repr__(self) -> str:
        shapes = ", ".join(f"{tuple(t.shape)} {str(t.dtype)[6:]}" for t in self.inputs)
        return f"Case({self.pipeline}; inputs {shapes})"


def values(special: bool = True) -> st.SearchStrategy[float]:
    """Scalars: mostly moderate floats, sometimes NaN, infinities, zeros and tiny or large values."""
    moderate = st.floats(-10.0, 10.0, allow_nan=False, width=32)
    if not special:
        return moderate
    rare = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-30, -1e-30, 1e4, -1e4])
    return st.one_of(moderate, moderate, moderate, moderate, moderate, moderate, moderate, rare)


def integer_values(dtype: torch.dtype) -> st.SearchStrategy[int | bool]:
    """Python ints valid for the integer ``dtype`` (bools for ``torch.bool``): mostly small, often anywhere in
    int8's and uint8's whole range (so that arithmetic wraps), sometimes the extremes of ``dtype`` and, for the
    wider types, large magnitudes."""
    if dtype == torch.bool:
        return st.booleans()
    info = torch.iinfo(dtype)
    small = st.integers(max(info.min, -10), min(info.max, 10))
    edges = st.sampled_from(sorted({info.min, info.min + 1, info.max - 1, info.max, 0, 1}))
    if info.bits == 8:
        return st.one_of(small, st.integers(info.min, info.max), edges)
    moderate = st.integers(max(info.min, -300), min(info.max, 300))
    return st.one_of(small, small, small, moderate, moderate, st.integers(info.min, info.max), edges)


def dtypes(floating: bool = True, integer: bool = True, boolean: bool = True) -> st.SearchStrategy[torch.dtype]:
    """One of the supported dtypes (:data:`ALL_DTYPES`): the floating ones, the integer ones (:data:`INT_DTYPES`)
    and bool, each group when asked for."""
    pool = (FLOAT_DTYPES if floating else ()) + (INT_DTYPES if integer else ()) + (BOOL_DTYPES if boolean else ())
    if not pool:
        raise ValueError("dtypes() needs at least one of floating, integer, boolean")
    return st.sampled_from(pool)


def shapes(max_rank: int = 3, max_side: int = 17, allow_empty: bool = False) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes of rank 0 to ``max_rank``; sides from 1 (size-1 axes) to ``max_side`` (non-powers of 2), and with
    ``allow_empty`` sometimes 0 (a 0-size tensor)."""
    nonempty = st.lists(st.integers(1, max_side), min_size=0, max_size=max_rank).map(tuple)
    if not allow_empty:
        return nonempty

    @st.composite
    def some_empty(draw):  # about one shape in five of rank >= 1 gets a 0-size side
        shape = list(draw(nonempty))
        if shape and draw(st.integers(0, 4)) == 0:
            shape[draw(st.integers(0, len(shape) - 1))] = 0
        return tuple(shape)
    return some_empty()


@st.composite
def tensors(draw, shape: tuple[int, ...], dtype: torch.dtype, special: bool = True) -> torch.Tensor:
    """A contiguous CPU tensor of ``shape`` and ``dtype``: floats from :func:`values` (NaN, infinities and signed
    zeros included when ``special``), integers and bools from :func:`integer_values`."""
    count = math.prod(shape)
    if dtype.is_floating_point:
        data = draw(st.lists(values(special), min_size=count, max_size=count))
        return torch.tensor(data, dtype=torch.float64).reshape(shape).to(dtype)
    data = draw(st.lists(integer_values(dtype), min_size=count, max_size=count))
    return torch.tensor(data, dtype=dtype).reshape(shape)


LAYOUTS = ("contiguous", "transposed", "permuted", "stepped", "offset", "expanded")


@st.composite
def laid_out(draw, t: torch.Tensor) -> torch.Tensor:
    """``t``'s shape and values in one of :data:`LAYOUTS`: viewed with reversed strides, with the strides of a
    random permutation of its axes, as every other element of a wider tensor, at a storage offset, or (values
    repeated) as a stride-0 expansion. Any dtype; 0-d and 0-size tensors too (a layout that does not apply to
    the rank gives ``t`` itself)."""
    layout = draw(st.sampled_from(LAYOUTS))
    if layout == "transposed" and t.dim() >= 2:
        return t.permute(*reversed(range(t.dim()))).contiguous().permute(*reversed(range(t.dim())))
    if layout == "permuted" and t.dim() >= 2:
        order = draw(st.permutations(range(t.dim())))
        inverse = sorted(range(t.dim()), key=order.__getitem__)
        return t.permute(*order).contiguous().permute(*inverse)
    if layout == "stepped" and t.dim() >= 1:
        wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        wide[..., ::2] = t
        return wide[..., ::2]
    if layout == "offset":
        flat = t.reshape(-1)
        return torch.cat([torch.zeros(1, dtype=t.dtype), flat])[1:].reshape(t.shape)
    if layout == "expanded" and t.dim() >= 1:
        axis = draw(st.integers(0, t.dim() - 1))
        return t.narrow(axis, 0, 1).expand(t.shape) if t.shape[axis] > 0 else t
    return t


@st.composite
def broadcastable(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``shape`` without growing it: a suffix of it, some sides set to 1."""
    keep = draw(st.integers(0, len(shape)))
    suffix = shape[len(shape) - keep:]
    return tuple(1 if draw(st.booleans()) and n > 1 and draw(st.booleans()) else n for n in suffix)


# After a reduce or scan the stream holds sums of many elements, whose last-bit rounding depends on the order of
# summation; an exponential of such a value multiplies that rounding by |value| * ln 2 (its condition number),
# beyond what the oracle's error scale covers. Elsewhere exponentials are drawn as usual.
_ILL_CONDITIONED_AFTER_COMBINE = ("exp", "exp2", "expm1")
# Which of +0.0 and -0.0 a max/min reduction or scan keeps on a tie is unspecified (IEEE 754's maxNum leaves it
# open, and torch's own amax and cummax choose differently), so after one no function that turns the sign of a
# zero into an infinity is drawn.
_MAX_LIKE = ("max", "min", "cummax", "cummin")
_ZERO_SIGN_TO_INF = ("rsqrt", "reciprocal", "div")


def _unary(draw, after_combine: bool = False, after_max: bool = False):
    names = [n for n in SMOOTH_UNARY if not (after_combine and n in _ILL_CONDITIONED_AFTER_COMBINE)
             and not (after_max and n in _ZERO_SIGN_TO_INF)]
    choice = draw(st.sampled_from(tuple(names) + ("affine", "leaky")))
    if choice == "affine":
        a = draw(st.floats(-3, 3, allow_nan=False, width=32))
        b = draw(st.floats(-3, 3, allow_nan=False, width=32))
        return lambda v: v * a + b
    if choice == "leaky":
        return lambda v: BUILTINS["where"](v > 0, v, 0.25 * v)
    return BUILTINS[choice]


@st.composite
def pipelines_and_inputs(draw, max_numel: int = 4096, allow_empty: bool = True, mixed: bool = True) -> Case:
    """A random pipeline (maps, zip_withs, at most one reduce or scan) and float inputs for it.

    With ``allow_empty`` some shapes have a 0-size side (a max or min over an empty axis then has no value:
    torch raises, and so must tricomb). With ``mixed`` a zip_with sometimes brings in an integer input, which
    torch's promotion turns into the stream's float dtype.
    """
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    shape = _trim(draw(shapes(allow_empty=allow_empty)), max_numel)
    combine = draw(st.sampled_from((None,) + REDUCTIONS + SCANS))
    if combine in _SLOW_IN_INTERPRETER:
        shape = _trim(shape, 512)
    shape_after = shape
    stages = []
    inputs = [draw(tensors(shape, dtype).flatmap(laid_out))]
    others = (dtype, dtype, torch.float32) + ((torch.int8, torch.int32, torch.uint8) if mixed else ())
    n_before = draw(st.integers(0, 3))
    for _ in range(n_before):
        stages.append(_stage(draw, shape, inputs, others))
    if combine is not None:
        if combine in ("prod", "cumprod"):
            stages.append(api.map(lambda v: 0.5 + BUILTINS["sigmoid"](v)))  # keep products in range
        n_after = draw(st.integers(0, 2))
        stage, shape_after = _combine(draw, combine, shape, last=n_after == 0)
        stages.append(stage)
        for _ in range(n_after):
            stages.append(_stage(draw, shape_after, inputs, others, after_combine=True,
                                 after_max=combine in _MAX_LIKE))
    if not stages:
        stages.append(api.map(_unary(draw)))
    return Case(_compose(stages), tuple(inputs))


def _trim(shape: tuple[int, ...], max_numel: int) -> tuple[int, ...]:
    while math.prod(shape) > max_numel:
        shape = shape[1:]
    return shape


def _compose(stages: list) -> api.Pipeline:
    pipe = stages[0]
    for s in stages[1:]:
        pipe = pipe >> s
    return pipe


def _stage(draw, shape, inputs: list, others, after_combine: bool = False, after_max: bool = False) -> api.Pipeline:
    if draw(st.booleans()):
        return api.map(_unary(draw, after_combine, after_max))
    op = BUILTINS[draw(st.sampled_from(tuple(n for n in SMOOTH_BINARY if not (after_max and n in _ZERO_SIGN_TO_INF))))]
    other = draw(broadcastable(shape))
    inputs.append(draw(tensors(other, draw(st.sampled_from(others))).flatmap(laid_out)))
    return api.zip_with(op)


# ---- integer and bool pipelines -------------------------------------------------------------------------------

EXACT_BINARY = ("add", "sub", "mul", "maximum", "minimum")
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
_NOT_FOR_BOOL = ("sub", "neg", "abs")  # torch refuses these on bool tensors


def _stream_dtype(stages: list, inputs: list) -> torch.dtype:
    """The dtype of the stream after ``stages``, as torch decides it (evaluated on meta tensors)."""
    from ..pipeline.evaluate import evaluate
    if not stages:
        return inputs[0].dtype
    # 0-size sides read as 1: a max over an empty axis raises, yet its dtype is known (and the test checks
    # that tricomb raises too); broadcasting and ranks, hence dtypes, stay the same
    metas = [torch.empty(tuple(n or 1 for n in t.shape), dtype=t.dtype, device="meta") for t in inputs]
    return evaluate(_compose(stages).ir, metas).dtype


def _int_unary(draw, dtype: torch.dtype):
    """A map function exact on ``dtype`` (an integer or bool dtype; for a float one, a continuous function)."""
    where = BUILTINS["where"]
    const = st.integers(-5, 5)
    if dtype.is_floating_point:
        choices = ("neg", "abs", "affine", "square")  # continuous: no comparisons on floats
    elif dtype == torch.bool:
        choices = ("affine", "select", "compare", "logical", "clamp")
    else:
        choices = ("neg", "abs", "affine", "square", "clamp", "where", "select", "compare", "compare")
    choice = draw(st.sampled_from(choices))
    if choice in ("neg", "abs", "square"):
        return BUILTINS[choice]
    if choice == "affine":  # wraps in the stream's dtype (int8 * 3 stays int8, as in torch)
        a, b = draw(st.integers(-3, 3)), draw(const)
        return lambda v: v * a - b
    if choice == "clamp":
        lo = draw(const)
        hi = lo + draw(st.integers(0, 6))
        # torch.maximum takes no Python number: clamp with where (a weak scalar keeps the stream's dtype)
        return lambda v: where(v > hi, hi, where(v < lo, lo, v))
    if choice == "where":
        c, a, b = draw(const), draw(st.integers(-3, 3)), draw(const)
        cmp = BUILTINS[draw(st.sampled_from(COMPARISONS))]
        return lambda v: where(cmp(v, c), v * a, v - b)
    if choice == "select":  # a function of the sign only: keeps products of many elements small
        a, b = draw(const), draw(const)
        if dtype == torch.bool:
            return lambda v: where(v, a, b)
        return lambda v: where(v > 0, a, b)
    if choice == "logical":  # bool with bool: add is or, mul is and, in torch
        op, other = draw(st.sampled_from(("add", "mul", "eq", "ne"))), draw(st.booleans())
        return lambda v: BUILTINS[op](v, other)
    cmp = BUILTINS[draw(st.sampled_from(COMPARISONS))]
    c = draw(const)
    return lambda v: cmp(v, c)


def _int_binary(draw, stream: torch.dtype, other: torch.dtype):
    """A zip_with function of the stream and one new input, exact when both are integral."""
    exact = not stream.is_floating_point and not other.is_floating_point
    has_bool = torch.bool in (stream, other)
    ops = [o for o in EXACT_BINARY if not (has_bool and o in _NOT_FOR_BOOL)]
    if exact:
        ops += ["compare", "select"]
    choice = draw(st.sampled_from(ops))
    if choice == "compare":
        return BUILTINS[draw(st.sampled_from(COMPARISONS))]
    if choice == "select":
        cmp = BUILTINS[draw(st.sampled_from(COMPARISONS))]
        where = BUILTINS["where"]
        return lambda s, b: where(cmp(s, b), s, b)
    return BUILTINS[choice]


@st.composite
def integer_pipelines_and_inputs(draw, max_numel: int = 2048, allow_empty: bool = True,
                                 mixed: bool = True) -> Case:
    """A random pipeline over integer or bool inputs (maps and zip_withs exact on integers, at most one
    sum/prod/max/min reduce, over random axes with random keepdim, or cumsum/cumprod/cummax/cummin scan) and
    inputs for it, in random layouts.

    With ``mixed`` a zip_with sometimes brings in an input of another integer dtype, bool, or a float dtype
    (torch's promotion decides the new stream dtype); after a float input only continuous operations follow,
    so a result is floating exactly when a float entered the computation.
    """
    dtype = draw(dtypes(floating=False))
    shape = _trim(draw(shapes(allow_empty=allow_empty)), max_numel)
    combine = draw(st.sampled_from((None,) + INT_REDUCTIONS + SCANS))
    if combine in _SLOW_IN_INTERPRETER:
        shape = _trim(shape, 512)
    inputs = [draw(tensors(shape, dtype).flatmap(laid_out))]
    stages: list = []

    def stage(at_shape):
        current = _stream_dtype(stages, inputs)
        if draw(st.booleans()):
            return api.map(_int_unary(draw, current))
        pool = (current, current) + INTEGRAL_DTYPES + ((torch.float32, torch.float64, torch.float16) if mixed else ())
        other_dtype = draw(st.sampled_from(pool))
        if current.is_floating_point and other_dtype == torch.bool:
            other_dtype = torch.int16
        fn = _int_binary(draw, current, other_dtype)
        inputs.append(draw(tensors(draw(broadcastable(at_shape)), other_dtype).flatmap(laid_out)))
        return api.zip_with(fn)

    for _ in range(draw(st.integers(0, 3))):
        stages.append(stage(shape))
    if combine is not None:
        integral = not (stages and _stream_dtype(stages, inputs).is_floating_point)
        n_after = draw(st.integers(0, 2))
        stage_, shape_after = _combine(draw, combine, shape, integral and not inputs[0].is_floating_point(),
                                       last=n_after == 0)
        stages.append(stage_)
        for _ in range(n_after):
            stages.append(stage(shape_after))
    if not stages:
        stages.append(api.map(_int_unary(draw, dtype)))
    return Case(_compose(stages), tuple(inputs))


@st.composite
def combines(draw, shape: tuple[int, ...], names: tuple[str, ...] = REDUCTIONS + SCANS,
             integral: bool = False) -> api.Pipeline:
    """One reduce or scan stage for a stream of ``shape``, named from ``names``: a random axis (negative ones
    too), tuple of axes or ``None``, and a random keepdim; a reduce is sometimes written in the general form
    (``tc.reduce(tc.add, ...)``)."""
    return _combine(draw, draw(st.sampled_from(names)), shape, integral)[0]


@st.composite
def elementwise_cases(draw, max_numel: int = 2048, allow_empty: bool = True) -> Case:
    """A zip_with of two inputs of independent dtypes (any of :data:`ALL_DTYPES`), broadcast shapes and layouts,
    with an operation torch accepts for them: exact ones (comparisons, where) only when both are integral,
    continuous ones (add, sub, mul, maximum, minimum) otherwise; sometimes a map follows."""
    a, b = draw(dtypes()), draw(dtypes())
    shape = _trim(draw(shapes(allow_empty=allow_empty)), max_numel)
    other = draw(broadcastable(shape))
    if draw(st.booleans()):
        shape, other = other, shape  # the broadcast side first
    inputs = [draw(tensors(shape, a).flatmap(laid_out)), draw(tensors(other, b).flatmap(laid_out))]
    stages = [api.zip_with(_int_binary(draw, a, b))]
    out = _stream_dtype(stages, inputs)
    if draw(st.booleans()) and not (out.is_floating_point and draw(st.booleans())):
        stages.append(api.map(_int_unary(draw, out)))
    return Case(_compose(stages), tuple(inputs))


def _combine(draw, name: str, shape: tuple[int, ...], integral: bool = False, last: bool = True):
    """A reduce or scan stage named ``name``; ``integral``: the stream holds integers or bools, so an integer
    ``dtype=`` may be drawn (converting floats to integers is a jump, as floor is). cummax and cummin return
    (values, indices) as torch's do; unless ``last``, their values alone (the general scan) are drawn, so that
    the one-field stages after them fit."""
    stage_fn = getattr(api, name)
    if name in ("cummax", "cummin") and not last:
        op = BUILTINS["maximum" if name == "cummax" else "minimum"]
        stage_fn = functools.partial(api.scan, op)
    rank = len(shape)
    if name in SCANS:
        axis = draw(st.integers(-max(rank, 1), max(rank, 1) - 1))
        return stage_fn(axis=axis, reverse=draw(st.booleans()), exclusive=draw(st.booleans()),
                        **_dtype_argument(draw, name, integral)), shape
    bound = max(rank, 1)
    if name in INDEX_REDUCTIONS:  # torch.argmax takes None or one axis
        axis = draw(st.one_of(st.none(), st.integers(-bound, bound - 1)))
        keepdim = draw(st.booleans())
        return stage_fn(axis=axis, keepdim=keepdim), _reduced_shape(shape, axis, keepdim)
    axis = draw(st.one_of(st.none(), st.integers(-bound, bound - 1),
                          st.lists(st.integers(0, bound - 1), min_size=1, max_size=bound, unique=True).map(
                              lambda axes: tuple(draw(st.sampled_from((a, a - bound))) for a in axes))))
    keepdim = draw(st.booleans())
    if name in ("sum", "prod", "max", "min") and draw(st.integers(0, 3)) == 0:  # the general form
        op = BUILTINS[{"sum": "add", "prod": "mul", "max": "maximum", "min": "minimum"}[name]]
        return api.reduce(op, axis=axis, keepdim=keepdim), _reduced_shape(shape, axis, keepdim)
    stage = stage_fn(axis=axis, keepdim=keepdim, **_dtype_argument(draw, name, integral))
    return stage, _reduced_shape(shape, axis, keepdim)


def _dtype_argument(draw, name: str, integral: bool = False) -> dict:
    """Sometimes a ``dtype=`` for the shorthands that take one, as torch's do."""
    if name not in _TAKES_DTYPE or draw(st.integers(0, 3)):
        return {}
    if not integral:
        return {"dtype": draw(st.sampled_from((torch.float64, torch.float32)))}
    if name in ("prod", "cumprod"):
        # an integer product converted to a float overflows, and inf * 0 then depends on the order of combination
        return {"dtype": torch.int64}
    if name == "nansum":
        return {"dtype": draw(st.sampled_from((torch.float64, torch.float32)))}  # torch 2.11 refuses int nansum
    return {"dtype": draw(st.sampled_from((torch.float64, torch.float32, torch.int64, torch.int32)))}


INDEX_REDUCTIONS = ("argmax", "argmin")
LOGICAL_REDUCTIONS = ("any", "all")
_TAKES_DTYPE = ("sum", "prod", "nansum", "cumsum", "cumprod")


def _reduced_shape(shape, axis, keepdim):
    rank = len(shape)
    if axis is None or rank == 0:
        axes = set(range(rank))
    else:
        axes = {a % rank for a in ((axis,) if isinstance(axis, int) else axis)}
    if keepdim:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


# ---- differentiable pipelines ----------------------------------------------------------------------------------

# unary functions smooth on every real (a kink or a pole would make finite differences meaningless), built from
# builtins, so that the derivative table's rule for each is exercised
_SMOOTH_EVERYWHERE = {
    "neg": lambda v: -v, "exp": lambda v: BUILTINS["exp"](0.5 * v), "exp2": lambda v: BUILTINS["exp2"](0.5 * v),
    "expm1": lambda v: BUILTINS["expm1"](0.5 * v), "sin": BUILTINS["sin"], "cos": BUILTINS["cos"],
    "tanh": BUILTINS["tanh"], "sigmoid": BUILTINS["sigmoid"], "softplus": BUILTINS["softplus"],
    "gelu": BUILTINS["gelu"], "gelu_tanh": BUILTINS["gelu_tanh"], "silu": BUILTINS["silu"], "erf": BUILTINS["erf"],
    "square": BUILTINS["square"], "log": lambda v: BUILTINS["log"](1.0 + v * v),
    "log2": lambda v: BUILTINS["log2"](1.5 + BUILTINS["sin"](v)), "log1p": lambda v: BUILTINS["log1p"](v * v),
    "sqrt": lambda v: BUILTINS["sqrt"](1.0 + v * v), "rsqrt": lambda v: BUILTINS["rsqrt"](1.0 + v * v),
    "reciprocal": lambda v: BUILTINS["reciprocal"](2.0 + BUILTINS["sin"](v)),
    "affine": lambda v: 0.75 * v - 0.5, "pow": lambda v: (1.0 + v * v) ** 1.5,
}
_BOUNDED = ("sin", "cos", "tanh", "sigmoid", "erf")  # smooth functions whose values and derivatives are bounded
_SMOOTH_BINARY_EVERYWHERE = {
    "add": BUILTINS["add"], "sub": BUILTINS["sub"], "mul": BUILTINS["mul"],
    "div": lambda a, b: a / (1.0 + b * b), "logaddexp": BUILTINS["logaddexp"],
    "pow": lambda a, b: BUILTINS["pow"](1.0 + a * a, BUILTINS["sin"](b)),
    "where": lambda a, b: BUILTINS["where"](b > 0, a * b, a - b),
}
DIFFERENTIABLE_FOLDS = (None, "sum", "mean", "max", "min", "logsumexp", "prod", "no-identity", "cumsum",
                        "cumprod", "logcumsumexp", "cummax", "cummin", "recurrence", "user-scan", "attach",
                        "two attaches", "scan then reduce", "reduce then reduce")
# folds whose inputs must not broadcast (repeats would tie)
_FULL_FOLDS = ("max", "min", "cummax", "cummin", "attach", "two attaches", "scan then reduce")
_SCANS = {"cumsum": api.cumsum, "cumprod": api.cumprod,
          "logcumsumexp": functools.partial(api.scan, BUILTINS["logaddexp"]),
          "cummax": functools.partial(api.scan, BUILTINS["maximum"]),
          "cummin": functools.partial(api.scan, BUILTINS["minimum"])}


def _no_identity(a, b):
    """``a + b + a * b``: associative and commutative (``(1 + a) (1 + b) - 1``), given no identity, so its
    gradient takes the validity flag."""
    return a + b + a * b


def _recurrence(axis: int, reverse: bool) -> api.Pipeline:
    """The linear recurrence on (value, decay) pairs made from one field: a tuple scan, then one field again."""
    from ..library import LINEAR
    return (api.map(lambda v: (v, BUILTINS["sigmoid"](v))) >> api.scan(LINEAR, axis=axis, reverse=reverse,
                                                                       identity=(0.0, 1.0))
            >> api.map(lambda h, decay: h + 0.5 * decay))


def _attach(draw, axis: int) -> api.Pipeline:
    """An attach of a sum, mean, max or logsumexp along ``axis`` (of a bounded smooth map first, but for max,
    where the map could tie), then a smooth function of the element and the row's result. (The map is bounded
    so that the stages around it do not compose into derivatives so steep that gradcheck's finite differences
    miss them: ``pow`` of ``pow`` into ``cos`` has a third derivative near 3e13 at -1.8.)"""
    name = draw(st.sampled_from(["sum", "mean", "max", "logsumexp"]))
    inner = api.reduce(BUILTINS["logaddexp"], axis=axis) if name == "logsumexp" else getattr(api, name)(axis=axis)
    if name != "max" and draw(st.booleans()):
        inner = api.map(_SMOOTH_EVERYWHERE[draw(st.sampled_from(_BOUNDED))]) >> inner
    use = _SMOOTH_BINARY_EVERYWHERE[draw(st.sampled_from(sorted(_SMOOTH_BINARY_EVERYWHERE)))]
    return api.attach(inner) >> api.map(use)


@st.composite
def differentiable_cases(draw, max_numel: int = 24) -> Case:
    """A pipeline whose gradient tricomb derives (maps and zip_withs of functions smooth everywhere, with at most
    one fold of :data:`DIFFERENTIABLE_FOLDS`, every closed form and the general adjoint rule's operators: a
    product, an operator without an identity, cumprod, logcumsumexp, cummax, cummin, the linear recurrence's
    tuple scan; or folds that make a pipeline of several: one or two attaches, a scan then a reduce, a reduce then
    a reduce of the rows; and stages after it that may bring in inputs of its result's shape), with float64
    inputs of moderate values (in [-2, 2], none repeated, so a max has no tie) and small sizes, for
    ``torch.autograd.gradcheck``. Inputs before a max, min, cummax, cummin or attach have the full shape: a
    broadcast input repeats its values along the reduced axes, which would tie."""
    shape = _trim(draw(shapes(max_side=5)), max_numel)
    fold = draw(st.sampled_from(DIFFERENTIABLE_FOLDS))
    inputs = [_distinct(draw, shape)]
    stages = []
    for _ in range(draw(st.integers(0, 2))):
        stages.append(_smooth_stage(draw, shape, inputs, full=fold in _FULL_FOLDS))
    if fold is not None:
        stage, shape = _differentiable_fold(draw, fold, shape)
        stages.append(stage)
        for _ in range(draw(st.integers(0, 2))):  # (no input joins after a reduce of the rows)
            stages.append(_smooth_stage(draw, shape, inputs, full=False, maps_only=fold == "reduce then reduce"))
    if not stages:
        stages.append(api.map(_SMOOTH_EVERYWHERE[draw(st.sampled_from(sorted(_SMOOTH_EVERYWHERE)))]))
    return Case(_compose(stages), tuple(inputs))


def _distinct(draw, shape) -> torch.Tensor:
    """float64 values in [-2, 2], all different (a random permutation of an evenly spaced grid, jittered)."""
    n = math.prod(shape)
    seed = draw(st.integers(0, 2 ** 31 - 1))
    gen = torch.Generator().manual_seed(seed)
    grid = torch.linspace(-2.0, 2.0, max(n, 1), dtype=torch.float64)[:n]
    jitter = torch.rand(n, generator=gen, dtype=torch.float64) * (3.0 / max(n, 1))
    return (grid + jitter)[torch.randperm(n, generator=gen)].reshape(shape)


def _smooth_stage(draw, shape, inputs: list, full: bool, maps_only: bool = False) -> api.Pipeline:
    if maps_only or draw(st.booleans()):
        return api.map(_SMOOTH_EVERYWHERE[draw(st.sampled_from(sorted(_SMOOTH_EVERYWHERE)))])
    op = _SMOOTH_BINARY_EVERYWHERE[draw(st.sampled_from(sorted(_SMOOTH_BINARY_EVERYWHERE)))]
    inputs.append(_distinct(draw, shape if full else draw(broadcastable(shape))))
    return api.zip_with(op)


def _differentiable_fold(draw, name: str, shape):
    rank = len(shape)
    bound = max(rank, 1)
    along = draw(st.integers(-bound, bound - 1))
    if name in _SCANS:
        # An exclusive logcumsumexp starts at its identity, -inf, where finite differences are NaN.
        exclusive = draw(st.booleans()) if name in ("cumsum", "cumprod") else False
        return _SCANS[name](axis=along, reverse=draw(st.booleans()), exclusive=exclusive), shape
    if name == "recurrence":
        return _recurrence(along, draw(st.booleans())), shape
    if name == "user-scan":
        return api.scan(_no_identity, axis=along, reverse=draw(st.booleans())), shape
    if name == "attach" or (name == "two attaches" and draw(st.booleans())):
        return _compose([_attach(draw, along) for _ in range(1 if name == "attach" else 2)]), shape
    if name == "two attaches":  # one right after the other: the second reduces the first field of a pair
        first, then = (_SMOOTH_BINARY_EVERYWHERE[draw(st.sampled_from(sorted(_SMOOTH_BINARY_EVERYWHERE)))]
                       for _ in range(2))
        inner = draw(st.sampled_from([api.sum, api.mean, api.max]))(axis=along)
        return (api.attach(draw(st.sampled_from([api.sum, api.mean, api.max]))(axis=along))
                >> api.attach(api.map(lambda v, r: v) >> inner)
                >> api.map(lambda v, r, q: then(first(v, r), q))), shape
    smooth = api.map(_SMOOTH_EVERYWHERE[draw(st.sampled_from(sorted(_SMOOTH_EVERYWHERE)))])
    if name == "scan then reduce":
        scan = _SCANS[draw(st.sampled_from(["cumsum", "cummax"]))](axis=along, reverse=draw(st.booleans()))
        return scan >> smooth >> draw(st.sampled_from([api.sum, api.max]))(axis=along), _reduced_shape(shape, along,
                                                                                                        False)
    if name == "reduce then reduce":
        return api.sum(axis=along) >> smooth >> api.sum(), ()
    axis = draw(st.one_of(st.none(), st.integers(-bound, bound - 1), st.lists(st.integers(0, bound - 1), min_size=1, max_size=bound, unique=True).map(tuple)))
    keepdim = draw(st.booleans())
    if name == "logsumexp":
        stage = api.reduce(BUILTINS["logaddexp"], axis=axis, keepdim=keepdim)
    elif name == "no-identity":
        stage = api.reduce(_no_identity, axis=axis, keepdim=keepdim)
    else:
        stage = getattr(api, name)(axis=axis, keepdim=keepdim)
    return stage, _reduced_shape(shape, axis, keepdim)
