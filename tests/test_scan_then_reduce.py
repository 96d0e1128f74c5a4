"""A scan followed by a reduce over the scanned axis is one kernel: each scanned tile is folded into the reduce's
accumulator in the same loop, and the scanned values are never stored (drawdown: running max, minus the input,
max)."""
import functools

import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st

import tricomb as tc
from tricomb.pipeline.evaluate import evaluate
from tricomb.testing import assert_matches_torch, schedule_overrides
from tricomb.testing.strategies import laid_out, shapes, tensors

from conftest import DEVICES, LOOKBACK_AGGREGATES_ONLY, LOOKBACK_TILES, one_launch

DRAWDOWN = tc.scan(tc.maximum) >> tc.zip_with(tc.sub) >> tc.max()


def test_drawdown_of_a_series_isone_launch(device):
    prices = torch.randn(3000, device=device).cumsum(0)
    got = one_launch(DRAWDOWN, prices, prices)
    want = (torch.cummax(prices.cpu(), 0).values - prices.cpu()).max()
    assert got.shape == () and torch.equal(got.cpu(), want)


@pytest.mark.parametrize("tiles", [{}, {"BLOCK_M": 2, "BLOCK_K": 4}, LOOKBACK_TILES, LOOKBACK_AGGREGATES_ONLY],
                         ids=["heuristic", "tiny-tiles", "look-back", "look-back-over-aggregates"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
def test_any_axis_direction_and_keepdim(tiles, axis, reverse, exclusive, device):
    x = torch.randn(7, 33, device=device)
    for keepdim in (False, True):
        pipe = (tc.cumsum(axis=axis, reverse=reverse, exclusive=exclusive) >> tc.map(lambda s: s * s)
                >> tc.sum(axis=axis, keepdim=keepdim))
        with schedule_overrides(**tiles):
            assert_matches_torch(pipe, x)


def test_inputs_join_between_and_after_and_the_reduce_may_be_a_mean_or_a_user_operator(device):
    x, y = torch.randn(6, 50, device=device), torch.randn(6, 50, device=device)
    bias = torch.randn(6, device=device)
    pipe = (tc.cumsum(axis=1) >> tc.zip_with(lambda s, b: s * b) >> tc.mean(axis=1)
            >> tc.zip_with(lambda m, c: m + c))
    assert_matches_torch(pipe, x, y, bias)
    odd = tc.reduce(lambda a, b: a + b + 0.25 * a * b, axis=1)  # no identity: a validity flag
    assert_matches_torch(tc.cumsum(axis=1) >> tc.map(lambda s: 0.01 * s) >> odd, x)


def test_a_tuple_scan_then_a_reduce(device):
    """The last value of a linear recurrence and its largest magnitude along the way, one kernel."""
    v, d = torch.randn(4, 200, device=device), torch.rand(4, 200, device=device)
    pipe = (tc.zip_with(lambda a, b: (a, b))
            >> tc.scan(lambda v1, d1, v2, d2: (v1 * d2 + v2, d1 * d2), axis=1, identity=(0.0, 1.0))
            >> tc.map(lambda h, decay: tc.abs(h)) >> tc.max(axis=1))
    got = one_launch(pipe, v, d)
    h, rows = torch.zeros(4, dtype=torch.float64), []
    for k in range(200):
        h = d.cpu()[:, k].double() * h + v.cpu()[:, k].double()
        rows.append(h.abs())
    torch.testing.assert_close(got.cpu().double(), torch.stack(rows, 1).amax(1), rtol=1e-4, atol=1e-5)


def test_a_reduce_over_other_axes_is_refused_with_the_fix():
    with pytest.raises(tc.UnsupportedError, match="over exactly the scanned axis"):
        (tc.cumsum(axis=1) >> tc.sum(axis=0))(torch.ones(3, 4))
    with pytest.raises(tc.UnsupportedError, match="a scan and then a reduce over the scanned axis"):
        tc.sum(axis=1) >> tc.cumsum()


@given(st.data())
def test_random_scan_then_reduce_match_torch(data):
    """Random scan (cumsum, cumprod, running max/min, cummax with indices), maps between, then a random reduce
    along the same axis, on random dtypes, shapes and layouts."""
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64, torch.float16, torch.int32, torch.int64]))
    shape = data.draw(shapes(max_rank=3, max_side=17, allow_empty=True).filter(lambda s: len(s) >= 1))
    x = data.draw(tensors(shape, dtype).flatmap(laid_out))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    reverse, exclusive, keepdim = data.draw(st.booleans()), data.draw(st.booleans()), data.draw(st.booleans())
    scan_name = data.draw(st.sampled_from(["cumsum", "cumprod", "running max", "running min", "cummax"]))
    scan = {"cumsum": tc.cumsum, "cumprod": tc.cumprod, "cummax": tc.cummax,
            "running max": functools.partial(tc.scan, tc.maximum),
            "running min": functools.partial(tc.scan, tc.minimum)}[scan_name]
    pipe = tc.map(lambda v: 0.5 + tc.sigmoid(v)) if scan_name == "cumprod" else None  # products stay in range
    stages = [scan(axis=axis, reverse=reverse, exclusive=exclusive)]
    if scan_name == "cummax":
        stages.append(tc.map(lambda v, i: v - i))
    elif data.draw(st.booleans()):
        stages.append(tc.map(lambda v: v * 2 - 1))
    reduce_name = data.draw(st.sampled_from(["sum", "max", "min", "prod"] + (["mean"] if dtype.is_floating_point
                                                                            or scan_name == "cumprod" else [])))
    stages.append(getattr(tc, reduce_name)(axis=axis, keepdim=keepdim))
    for stage in stages:
        pipe = stage if pipe is None else pipe >> stage
    note(str(pipe))
    for device in DEVICES:
        try:
            want = evaluate(pipe.ir, [x])
        except (RuntimeError, TypeError, IndexError, ValueError) as exc:
            note(f"torch refuses: {exc}")
            with pytest.raises(tc.TricombError):
                pipe(x.to(device))
            continue
        if want.dtype.is_floating_point:
            assert_matches_torch(pipe, x.to(device))
        else:
            got = pipe(x.to(device))
            assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


def test_a_reduce_that_does_not_commute_after_a_scan_keeps_the_order(device):
    x = torch.randn(3, 70, device=device)
    with schedule_overrides(BLOCK_K=8):
        first = (tc.cumsum(axis=1) >> tc.reduce(lambda a, b: a, axis=1))(x)
        last = (tc.cumsum(axis=1) >> tc.reduce(lambda a, b: b, axis=1))(x)
    assert torch.equal(first.cpu(), x.cpu()[:, 0])
    torch.testing.assert_close(last.cpu(), x.cpu().sum(1), rtol=1e-5, atol=1e-5)


def test_a_reduce_that_does_not_commute_after_a_reversed_scan_is_refused():
    """A reversed scan hands the fused reduce its values from the last to the first; a reduce whose operator does
    not commute would then take the wrong end ((cumsum(reverse) | reduce((a, b) -> b)) of [1, 0] gave 1, torch's
    answer is 0). It is refused when built; a commuting reduce after a reversed scan stays fused."""
    with pytest.raises(tc.UnsupportedError, match="does not commute"):
        tc.cumsum(reverse=True) >> tc.reduce(lambda a, b: b, axis=-1)
    with pytest.raises(tc.UnsupportedError, match="split it into two pipelines"):
        tc.parse("cumprod(reverse=True, exclusive=True) | reduce ((a, b) -> a)(axis=-1)")
    x = torch.tensor([[1.0, 0.0, 2.0]])
    assert (tc.cumsum(reverse=True) >> tc.max(axis=-1))(x).tolist() == [3.0]
