"""Hypothesis: random pipelines on random tensors equal torch.

Float results are compared with the float64 torch oracle, within tolerances that grow with the reduction length
(tricomb.testing.assertions). Integer and bool results are compared for equality with torch evaluating the same
pipeline in the input dtypes (integer arithmetic wraps exactly as torch's, so nothing is left to tolerate).
Where torch refuses a drawn case (a max over an empty axis, a mean of integers), tricomb must refuse it too.
The strategies cross dtypes (every supported one), shapes (0-d and 0-size included), layouts, axes and keepdim.
"""
import math

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from tricomb.errors import TricombError
from tricomb.pipeline.evaluate import evaluate
from tricomb.testing import assert_matches_torch, schedule_overrides
from tricomb.testing.strategies import (ALL_DTYPES, INDEX_REDUCTIONS, INT_DTYPES, LOGICAL_REDUCTIONS, Case,
                                        combines, dtypes, elementwise_cases, integer_pipelines_and_inputs,
                                        laid_out, pipelines_and_inputs, shapes, tensors)

from conftest import DEVICES, LOOKBACK_TILES

# The integer and per-dtype tests are quick (small kernels): they draw more examples than the profile's default.
MORE = settings(max_examples=2 * settings.default.max_examples)
TINY_TILES = {"BLOCK": 16, "BLOCK_M": 2, "BLOCK_K": 4, "SPLIT": 3}
_TORCH_REFUSES = (RuntimeError, TypeError, ValueError, IndexError, OverflowError)


def assert_same_as_torch(pipe, *inputs: torch.Tensor) -> None:
    """tricomb's result equals torch's: exactly for integer and bool results, within the oracle's tolerance for
    floats; and where torch raises, tricomb raises a TricombError."""
    try:
        want = evaluate(pipe.ir, [t.cpu() for t in inputs])
    except _TORCH_REFUSES as exc:
        with pytest.raises(TricombError):
            pipe(*inputs)
        note(f"torch and tricomb both refuse: {exc}")
        return
    wants = want if isinstance(want, tuple) else (want,)
    if any(w.dtype.is_floating_point for w in wants):
        assert_matches_torch(pipe, *inputs)
        return
    got = pipe(*inputs)
    for k, (g, w) in enumerate(zip(got if isinstance(got, tuple) else (got,), wants)):
        _assert_equal(pipe, g, w, f"field {k}: " if len(wants) > 1 else "")


def _assert_equal(pipe, got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    assert got.dtype == want.dtype, f"{pipe}: {name}dtype {got.dtype}, torch gives {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape), \
        f"{pipe}: {name}shape {tuple(got.shape)}, torch gives {tuple(want.shape)}"
    bad = got.cpu() != want
    if bool(bad.any()):
        where = bad.nonzero()[:5].tolist()
        detail = "; ".join(f"at {tuple(i)}: got {got.cpu()[tuple(i)].item()!r}, torch {want[tuple(i)].item()!r}"
                           for i in where)
        raise AssertionError(f"{pipe}: {name}{int(bad.sum())} of {bad.numel()} elements differ from torch: {detail}")


def _check(case: Case, overrides=None) -> None:
    note(repr(case))
    for device in DEVICES:
        inputs = [t.to(device) for t in case.inputs]
        with schedule_overrides(**(overrides or {})):
            assert_same_as_torch(case.pipeline, *inputs)


@given(pipelines_and_inputs())
def test_random_pipelines_match_torch(case):
    _check(case)


@given(pipelines_and_inputs(max_numel=1024))
def test_random_pipelines_match_torch_with_tiny_tiles(case):
    """Tiny tiles reach the multi-tile loops, the carried scan prefix, and split rows with the ticket."""
    _check(case, TINY_TILES)


@given(pipelines_and_inputs(max_numel=1024))
def test_random_pipelines_match_torch_with_look_back_scans(case):
    """Scans with one tile per program, each tile's prefix found by the decoupled look-back (and a reduce fused
    after a scan finished by the last program)."""
    _check(case, {**TINY_TILES, **LOOKBACK_TILES})


@MORE
@given(integer_pipelines_and_inputs())
def test_integer_pipelines_match_torch(case):
    """Integer and bool inputs (wrap-around, promotion between integer dtypes, bool streams from comparisons,
    float inputs mixed in) through maps, zip_withs and one sum/prod/max/min or cumulative scan."""
    _check(case)


@MORE
@given(integer_pipelines_and_inputs(max_numel=1024))
def test_integer_pipelines_match_torch_with_tiny_tiles(case):
    _check(case, TINY_TILES)


@st.composite
def _single_combines(draw):
    dtype = draw(dtypes())
    shape = draw(shapes(allow_empty=True))
    while math.prod(shape) > 512:
        shape = shape[1:]
    x = draw(tensors(shape, dtype).flatmap(laid_out))
    names = ("sum", "prod", "max", "min", "cumsum", "cumprod", "cummax", "cummin") + INDEX_REDUCTIONS \
        + LOGICAL_REDUCTIONS
    if dtype.is_floating_point or draw(st.integers(0, 9)) == 0:  # torch's mean refuses integers: so must we
        names += ("mean", "nanmean")
    return Case(draw(combines(shape, names, integral=not dtype.is_floating_point)), (x,))


@MORE
@given(_single_combines())
def test_one_reduce_or_scan_any_dtype_layout_axis(case):
    """Every dtype x layout x axis (int, negative, tuple, None) x keepdim for each reduce and scan alone, with
    dtype= sometimes, argmax/argmin and any/all too: 0-d inputs, 0-size inputs (sums of nothing are 0, products
    1; torch refuses a max or argmax of nothing, and argmax of bool)."""
    _check(case)


@given(elementwise_cases())
def test_zip_with_any_pair_of_dtypes(case):
    """Two inputs of any dtypes: torch's promotion (result_type) decides the result dtype, and tricomb's must
    be the same."""
    _check(case)


@given(st.sampled_from(ALL_DTYPES).flatmap(
    lambda d: shapes(allow_empty=True).flatmap(lambda s: tensors(s, d))).flatmap(
    lambda t: st.tuples(st.just(t), laid_out(t))))
def test_strategies_lay_out_any_dtype_and_shape(pair):
    """The strategies themselves: a laid-out tensor has the contiguous one's shape, dtype and values (an expanded
    one repeats its first slice along the expanded axis), and integer values fit their dtype."""
    t, view = pair
    assert view.shape == t.shape and view.dtype == t.dtype
    want = t
    expanded = [d for d in range(view.dim()) if view.stride(d) == 0 and view.shape[d] > 1]
    if expanded:
        want = t.narrow(expanded[0], 0, 1).expand(t.shape)
    torch.testing.assert_close(view, want, rtol=0, atol=0, equal_nan=True)
    if t.dtype in INT_DTYPES and t.numel():
        info = torch.iinfo(t.dtype)
        assert info.min <= int(t.min()) and int(t.max()) <= info.max


def test_half_precision_sums_accumulate_in_float32(device):
    """A float16 sum of 2048 + 1 * 2048 is 4096 only if the accumulator is wider than float16."""
    x = torch.tensor([2048.0] + [1.0] * 2048, dtype=torch.float16, device=device)
    from tricomb import sum as tc_sum
    assert tc_sum()(x).item() == 4096.0
