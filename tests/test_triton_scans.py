"""Triton's own scan test set (python/test/unit/language/test_core.py, test_scan2d), each case one tricomb
kernel: cumsum, cumprod, a first-element operator (associative, not commutative), the linear recurrence and
cummax with its index, forward and reverse, along both axes of 2-D inputs, each with the heuristic plan and with
one tile per program joined by the decoupled look-back (on one shape). References: torch.cumsum, torch.cumprod
and torch.cummax, and a sequential float64 loop for the rest."""
import math

import pytest
import torch

import tricomb as tc

from tricomb.testing import schedule_overrides

from conftest import LOOKBACK_AGGREGATES_ONLY, LOOKBACK_TILES, one_launch

PAIRS = tc.zip_with(lambda a, b: (a, b))


def _flip(t: torch.Tensor, axis: int, reverse: bool) -> torch.Tensor:
    return t.flip(axis) if reverse else t


def _sequential(op, fields: list[torch.Tensor], axis: int, reverse: bool) -> list[torch.Tensor]:
    """The inclusive scan of ``op`` (on tuples of Python floats) along ``axis``, element by element, in float64."""
    data = [_flip(f.double().cpu(), axis, reverse).movedim(axis, -1) for f in fields]
    out = [torch.empty_like(d) for d in data]
    for row in range(data[0].shape[0]):
        acc = None
        for k in range(data[0].shape[1]):
            item = tuple(d[row, k].item() for d in data)
            acc = item if acc is None else op(*acc, *item)
            for o, v in zip(out, acc):
                o[row, k] = v
    return [_flip(o.movedim(-1, axis), axis, reverse) for o in out]


def _close(got: torch.Tensor, want: torch.Tensor, rtol=1e-5, atol=1e-6):
    torch.testing.assert_close(got.cpu().double(), want.double(), rtol=rtol, atol=atol)


AXES_AND_DIRECTIONS = [(axis, reverse) for axis in (0, 1) for reverse in (False, True)]


# The heuristic plan on each of Triton's shapes; the look-back's two variants (each tile's prefix from its newest
# published prefix, or from aggregates alone) on one shape whose tiles of 4 leave a partial tile along both axes.
PLANS = [("heuristic", {}, shape) for shape in ((16, 32), (33, 7), (5, 129))] + [
    ("look-back", LOOKBACK_TILES, (33, 7)), ("look-back-over-aggregates", LOOKBACK_AGGREGATES_ONLY, (33, 7))]


@pytest.fixture(params=PLANS, ids=lambda p: f"{p[0]}-{p[2][0]}x{p[2][1]}")
def shape(request):
    """The input's shape, with the plan's schedule in force for the test."""
    _, schedule, shape = request.param
    with schedule_overrides(**schedule):
        yield shape


@pytest.mark.parametrize("axis,reverse", AXES_AND_DIRECTIONS)
def test_cumsum(axis, reverse, shape, device):
    x = torch.randn(shape, device=device)
    got = one_launch(tc.cumsum(axis=axis, reverse=reverse), x)
    _close(got, _flip(torch.cumsum(_flip(x.cpu().double(), axis, reverse), axis), axis, reverse), rtol=1e-4,
           atol=1e-4)


@pytest.mark.parametrize("axis,reverse", AXES_AND_DIRECTIONS)
def test_cumprod(axis, reverse, shape, device):
    x = 1.0 + 0.1 * torch.rand(shape, device=device)  # products stay in range
    got = one_launch(tc.cumprod(axis=axis, reverse=reverse), x)
    _close(got, _flip(torch.cumprod(_flip(x.cpu().double(), axis, reverse), axis), axis, reverse), rtol=1e-4)


def _first(a, b):
    return a


@pytest.mark.parametrize("axis,reverse", AXES_AND_DIRECTIONS)
def test_first_element_operator(axis, reverse, shape, device):
    """``(a, b) -> a`` is associative and not commutative, and has no identity: tricomb adds a validity flag."""
    x = torch.randn(shape, device=device)
    got = one_launch(tc.scan(lambda a, b: a, axis=axis, reverse=reverse), x)
    want = _sequential(lambda a, b: (a,), [x], axis, reverse)[0]
    _close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("axis,reverse", AXES_AND_DIRECTIONS)
def test_linear_recurrence(axis, reverse, shape, device):
    """h = d * h + v as pairs (v1, d1), (v2, d2) -> (v1 * d2 + v2, d1 * d2)."""
    v, d = torch.randn(shape, device=device), torch.rand(shape, device=device)
    linear = tc.scan(lambda v1, d1, v2, d2: (v1 * d2 + v2, d1 * d2), axis=axis, reverse=reverse,
                     identity=(0.0, 1.0))
    got = one_launch(PAIRS >> linear, v, d)
    want = _sequential(lambda v1, d1, v2, d2: (v1 * d2 + v2, d1 * d2), [v, d], axis, reverse)
    for g, w in zip(got, want):
        _close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis,reverse", AXES_AND_DIRECTIONS)
def test_cummax_with_index(axis, reverse, shape, device):
    """torch.cummax's values and indices (the latest index on ties), ties made likely by rounding."""
    x = torch.randint(-4, 5, shape, device=device).float()
    positions = torch.arange(shape[axis], device=device).reshape((-1, 1) if axis == 0 else (1, -1)).expand(shape)
    running = tc.scan(lambda v1, i1, v2, i2: (tc.where(v2 >= v1, v2, v1), tc.where(v2 >= v1, i2, i1)), axis=axis,
                      reverse=reverse, identity=(-math.inf, -1))
    values, indices = one_launch(PAIRS >> running, x, positions)
    flipped = torch.cummax(_flip(x.cpu(), axis, reverse), axis)
    assert torch.equal(values.cpu(), _flip(flipped.values, axis, reverse))
    n = shape[axis]
    want_indices = _flip(flipped.indices, axis, reverse)
    assert torch.equal(indices.cpu(), n - 1 - want_indices if reverse else want_indices)
