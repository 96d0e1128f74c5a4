"""Hypothesis strategies for tricomb: random pipelines and the tensors they run on.

``pipelines_and_inputs()`` draws a pipeline of maps and zip_withs with at most one reduce or scan, together
with input tensors whose shapes broadcast correctly (rank 0 to 3, sizes 1 and non-powers of 2 included),
dtypes (float16, bfloat16, float32, float64), layouts (transposed, stepped, offset, expanded views) and values
(including NaN, infinities and signed zeros).

The random functions are continuous: a function with jumps (floor, sign, comparisons) can turn a one-ulp
difference into a large one, which says nothing about the kernel; those are checked on exact inputs by the
builtin table's own tests.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from .. import api
from ..scalar.trace import BUILTINS

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)

# unary builtins that are continuous where defined (NaN outside the domain is fine: torch agrees)
SMOOTH_UNARY = ("abs", "neg", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "square",
                "reciprocal", "sin", "cos", "tanh", "sigmoid", "softplus", "relu", "gelu", "gelu_tanh", "silu",
                "erf")
SMOOTH_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
REDUCTIONS = ("sum", "prod", "max", "min", "mean")
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


def shapes(max_rank: int = 3, max_side: int = 17) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes of rank 0 to ``max_rank``; sides from 1 (size-1 axes) to ``max_side`` (non-powers of 2)."""
    return st.lists(st.integers(1, max_side), min_size=0, max_size=max_rank).map(tuple)


@st.composite
def tensors(draw, shape: tuple[int, ...], dtype: torch.dtype, special: bool = True) -> torch.Tensor:
    """A CPU tensor of ``shape`` and ``dtype`` filled from :func:`values`."""
    count = math.prod(shape)
    data = draw(st.lists(values(special), min_size=count, max_size=count))
    return torch.tensor(data, dtype=torch.float64).reshape(shape).to(dtype)


LAYOUTS = ("contiguous", "transposed", "stepped", "offset", "expanded")


@st.composite
def laid_out(draw, t: torch.Tensor) -> torch.Tensor:
    """``t``'s shape in one of :data:`LAYOUTS`: the same values viewed with reversed strides, every other
    element of a wider tensor, a view at a storage offset, or (values repeated) a stride-0 expansion."""
    layout = draw(st.sampled_from(LAYOUTS))
    if layout == "transposed" and t.dim() >= 2:
        return t.permute(*reversed(range(t.dim()))).contiguous().permute(*reversed(range(t.dim())))
    if layout == "stepped" and t.dim() >= 1:
        wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        wide[..., ::2] = t
        return wide[..., ::2]
    if layout == "offset" and t.dim() >= 1:
        return torch.cat([t.reshape(-1)[:1], t.reshape(-1)])[1:].reshape(t.shape)
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


def _unary(draw):
    choice = draw(st.sampled_from(SMOOTH_UNARY + ("affine", "leaky")))
    if choice == "affine":
        a = draw(st.floats(-3, 3, allow_nan=False, width=32))
        b = draw(st.floats(-3, 3, allow_nan=False, width=32))
        return lambda v: v * a + b
    if choice == "leaky":
        return lambda v: BUILTINS["where"](v > 0, v, 0.25 * v)
    return BUILTINS[choice]


@st.composite
def pipelines_and_inputs(draw, max_numel: int = 4096) -> Case:
    """A random pipeline (maps, zip_withs, at most one reduce or scan) and inputs for it."""
    dtype = draw(st.sampled_from(FLOAT_DTYPES))
    shape = draw(shapes())
    while math.prod(shape) > max_numel:
        shape = shape[1:]
    combine = draw(st.sampled_from((None,) + REDUCTIONS + SCANS))
    if combine in _SLOW_IN_INTERPRETER:
        while math.prod(shape) > 512:
            shape = shape[1:]
    shape_after = shape
    stages = []
    inputs = [draw(tensors(shape, dtype).flatmap(laid_out))]
    n_before = draw(st.integers(0, 3))
    for _ in range(n_before):
        stages.append(_stage(draw, shape, inputs, dtype))
    if combine is not None:
        if combine in ("prod", "cumprod"):
            stages.append(api.map(lambda v: 0.5 + BUILTINS["sigmoid"](v)))  # keep products in range
        stage, shape_after = _combine(draw, combine, shape)
        stages.append(stage)
        for _ in range(draw(st.integers(0, 2))):
            stages.append(_stage(draw, shape_after, inputs, dtype))
    if not stages:
        stages.append(api.map(_unary(draw)))
    pipe = stages[0]
    for s in stages[1:]:
        pipe = pipe >> s
    return Case(pipe, tuple(inputs))


def _stage(draw, shape, inputs: list, dtype) -> api.Pipeline:
    if draw(st.booleans()):
        return api.map(_unary(draw))
    op = BUILTINS[draw(st.sampled_from(SMOOTH_BINARY))]
    other = draw(broadcastable(shape))
    inputs.append(draw(tensors(other, draw(st.sampled_from((dtype, dtype, torch.float32)))).flatmap(laid_out)))
    return api.zip_with(op)


def _combine(draw, name: str, shape: tuple[int, ...]):
    stage_fn = getattr(api, name)
    rank = len(shape)
    if name in SCANS:
        axis = draw(st.integers(-max(rank, 1), max(rank, 1) - 1))
        return stage_fn(axis=axis), shape
    axis = draw(st.one_of(st.none(), st.integers(-max(rank, 1), max(rank, 1) - 1),
                          st.lists(st.integers(0, max(rank - 1, 0)), min_size=1, max_size=max(rank, 1),
                                   unique=True).map(tuple)))
    keepdim = draw(st.booleans())
    stage = stage_fn(axis=axis, keepdim=keepdim)
    return stage, _reduced_shape(shape, axis, keepdim)


def _reduced_shape(shape, axis, keepdim):
    rank = len(shape)
    if axis is None or rank == 0:
        axes = set(range(rank))
    else:
        axes = {a % rank for a in ((axis,) if isinstance(axis, int) else axis)}
    if keepdim:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)
