"""Scans forward and reversed, inclusive and exclusive, along either axis of 2-D inputs, one kernel each, against
torch (flip, cumulative op, flip; and the identity shifted in for exclusive scans)."""
import functools

import pytest
import torch

import tricomb as tc
from tricomb.testing import assert_matches_torch, count_launches, schedule_overrides

from conftest import LOOKBACK_TILES

TILES = [{}, {"BLOCK_M": 2, "BLOCK_K": 4}, LOOKBACK_TILES]


def _exclusive(inclusive: torch.Tensor, axis: int, identity) -> torch.Tensor:
    first = torch.full_like(inclusive.narrow(axis, 0, 1), identity)
    return torch.cat([first, inclusive.narrow(axis, 0, inclusive.shape[axis] - 1)], axis)


@pytest.mark.parametrize("tiles", TILES, ids=["heuristic", "tiny-tiles", "look-back"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumsum_and_cummax_in_every_direction(device, tiles, reverse, exclusive, axis):
    x = torch.randn(7, 13, device=device)
    running_max = functools.partial(tc.scan, tc.maximum)  # the values alone (tc.cummax adds their indices)
    for stage, torch_fn, identity in [(tc.cumsum, lambda t, d: torch.cumsum(t, d), 0.0),
                                      (running_max, lambda t, d: torch.cummax(t, d).values, -float("inf"))]:
        pipe = stage(axis=axis, reverse=reverse, exclusive=exclusive)
        with schedule_overrides(**tiles), count_launches() as launches:
            got = pipe(x)
        assert launches.triton == 1
        t = x.cpu().flip(axis) if reverse else x.cpu()
        want = torch_fn(t, axis)
        want = _exclusive(want, axis, identity) if exclusive else want
        want = want.flip(axis) if reverse else want
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
def test_directions_with_maps_around_and_integer_streams(device, reverse, exclusive):
    x = torch.randint(-50, 50, (5, 300), dtype=torch.int16, device=device)
    pipe = tc.map(lambda v: v * 3) >> tc.cumsum(axis=1, reverse=reverse, exclusive=exclusive) >> tc.zip_with(tc.sub)
    assert_matches_torch(pipe, x, torch.arange(300, device=device))
    assert_matches_torch(tc.cummin(axis=0, reverse=reverse, exclusive=exclusive), x)


def test_exclusive_scan_of_one_element_and_of_nothing(device):
    assert tc.cumsum(exclusive=True)(torch.tensor(3.0, device=device)).item() == 0.0
    assert tc.cumprod(exclusive=True, reverse=True)(torch.tensor([5.0], device=device)).tolist() == [1.0]
    empty = torch.empty(4, 0, dtype=torch.int32, device=device)
    values, indices = tc.cummax(axis=1, exclusive=True)(empty)
    assert values.shape == indices.shape == (4, 0) and indices.dtype == torch.int64


@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("reverse", [False, True])
def test_cummax_and_cummin_return_values_and_indices_as_torch(name, reverse, device):
    """torch.cummax/cummin: the latest index on ties, NaN the largest and the smallest, and its latest index;
    bool and integer streams; reversed, positions stay positions along the axis."""
    x = torch.tensor([[1.0, 3.0, 3.0, float("nan"), 2.0, float("nan"), 0.0, -5.0, -5.0]], device=device)
    ints = torch.randint(-3, 4, (6, 70), device=device)
    fn = getattr(torch, name)
    for t, axis in ((x, 1), (ints, 1), (ints, 0), (ints > 0, 1)):
        with schedule_overrides(BLOCK_M=2, BLOCK_K=4):
            result = getattr(tc, name)(axis=axis, reverse=reverse)(t)
        assert type(result).__name__ == name  # torch's named pair
        values, indices = result.values, result.indices
        flipped = fn(t.cpu().flip(axis) if reverse else t.cpu(), axis)
        want_values = flipped.values.flip(axis) if reverse else flipped.values
        want_indices = t.shape[axis] - 1 - flipped.indices.flip(axis) if reverse else flipped.indices
        assert torch.equal(values.cpu().nan_to_num(99.0), want_values.nan_to_num(99.0))
        assert torch.equal(indices.cpu(), want_indices) and indices.dtype == torch.int64


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32])
def test_a_cummax_of_a_stream_with_a_broadcast_row_compiles_and_matches_torch(dtype, device):
    """A cummax down the columns of ``x + row``, ``row`` broadcast along the scanned axis: the scanned tile is
    stored before the carry reads its last column (Triton 3.6 failed to compile the other order for int32 on
    the H200: codegen/combine.py, ``_carry_forward``)."""
    x = torch.randint(-9, 9, (7, 6), device=device).to(dtype)
    row = torch.randint(-9, 9, (6,), device=device).to(dtype)
    values, indices = (tc.zip_with(tc.add) >> tc.cummax(axis=0))(x, row)
    want = torch.cummax((x + row).cpu(), 0)
    assert torch.equal(values.cpu(), want.values) and torch.equal(indices.cpu(), want.indices)


def test_directions_print_and_parse_back():
    pipe = tc.cumsum(axis=0, reverse=True, exclusive=True)
    assert str(pipe) == "cumsum(axis=0, reverse=True, exclusive=True)"
    assert tc.parse(str(pipe)) == pipe
    with pytest.raises(tc.TricombError, match="reverse must be True or False"):
        tc.scan(tc.add, reverse=1)


def test_look_back_stays_right_across_launches_and_tile_sizes(device):
    """The look-back's status words are never cleared between launches: each launch publishes a larger status
    than the last, so every word left by an earlier launch (of any tile size, so of other tiles' layouts) reads
    as not yet published. Four launches alternate 4- and 8-element tiles, with and without published prefixes,
    on the same module."""
    x = torch.randn(3, 70, device=device)
    pipe = tc.cumsum(axis=1)
    want = torch.cumsum(x.cpu().double(), 1)
    for tiles in [{"BLOCK_K": 4}, {"BLOCK_K": 8, "PUBLISH_PREFIX": False}, {"BLOCK_K": 4}, {"BLOCK_K": 8}]:
        with schedule_overrides(**{**LOOKBACK_TILES, **tiles}), count_launches() as launches:
            got = pipe(x)
        assert launches.triton == 1
        torch.testing.assert_close(got.cpu().double(), want, rtol=1e-5, atol=1e-5)


def test_look_back_status_words_are_zeroed_when_the_count_wraps(monkeypatch):
    """After ``_StatusWords.LAST`` launches the status value would grow too large; the launcher then zeroes the
    words and counts again from 1. Forced here after 3 launches, with every word preset to a status no launch
    has published yet (as after a wrap without zeroing): each launch is right, and after the wrap no word is
    left above the launch's own prefix status."""
    from tricomb.runtime import launch
    x = torch.randn(2, 37)
    pipe = tc.cumsum(axis=1)
    module = launch.compile_for(pipe.ir, pipe._cache.entries(), (x,)).module
    monkeypatch.setattr(module._StatusWords, "LAST", 3)
    run = module.prepare(x, **LOOKBACK_TILES)
    status = run.launcher.status  # shared by this module's look-back launches on the CPU: start as when made
    status.words.zero_()
    status.launches = 0
    seen = []
    for _ in range(7):
        if status.launches == 2:
            status.words.fill_(100 << 32)  # the next launch wraps
        torch.testing.assert_close(run(x), torch.cumsum(x, 1), rtol=1e-5, atol=1e-5)
        seen.append(status.launches)
        assert int((status.words >> 32).max()) <= 2 * status.launches + 3
    assert seen == [1, 2, 1, 2, 1, 2, 1]  # 3 is LAST: the words are zeroed and the count starts at 1


def test_look_back_over_several_rows_per_program(device):
    """A column scan with the look-back: each program scans a tile of 4 rows by 4 elements; the rows' look-backs
    run together and stop when every row has found a published prefix."""
    x = torch.randn(45, 6, device=device)
    with schedule_overrides(BLOCK_M=4, **LOOKBACK_TILES):
        assert_matches_torch(tc.cumsum(axis=0), x)
        assert_matches_torch(tc.cummax(axis=0, reverse=True), x)
    with schedule_overrides(BLOCK_M=4, **LOOKBACK_TILES, PUBLISH_PREFIX=False):
        assert_matches_torch(tc.cumprod(axis=0, exclusive=True), 1 + 0.01 * x)


@pytest.mark.parametrize("tiles", [LOOKBACK_TILES, {**LOOKBACK_TILES, "PUBLISH_PREFIX": False}],
                         ids=["prefixes", "aggregates-only"])
def test_look_back_packs_one_32_bit_field_with_its_status(tiles, device):
    """One float32, int32 or bool field travels in the low half of its status word: negative int32 values,
    infinities and NaN survive the packing, and bool values stay bools."""
    x = torch.randn(2, 41, device=device)
    x[0, 5], x[1, 17] = float("inf"), float("nan")
    ints = torch.randint(-2**20, 2**20, (2, 41), dtype=torch.int32, device=device)
    flags = torch.rand(2, 41, device=device) < 0.05
    with schedule_overrides(**tiles):
        assert_matches_torch(tc.cumsum(axis=1), x)
        assert_matches_torch(tc.scan(tc.minimum, axis=1), x)
        assert torch.equal(tc.cumsum(axis=1, dtype=torch.int32)(ints).cpu(), torch.cumsum(ints.cpu(), 1, dtype=torch.int32))
        assert torch.equal(tc.scan(tc.logical_or, axis=1)(flags).cpu(), torch.cummax(flags.cpu().int(), 1).values.bool())


@pytest.mark.parametrize("tiles", [LOOKBACK_TILES, {**LOOKBACK_TILES, "PUBLISH_PREFIX": False}],
                         ids=["prefixes", "aggregates-only"])
def test_look_back_packs_two_or_three_32_bit_fields_with_their_status_in_one_16_byte_word(tiles, device):
    """(int32 running max, float32 sum, bool or) triples and a linear recurrence's float32 pairs travel with their
    status in one 16-byte word: negative int32 values, infinities, NaN and bools survive the packing, and each
    field matches torch's scan of it alone."""
    x = torch.randint(-1000, 1000, (3, 41), dtype=torch.int32, device=device)
    f = torch.randn(3, 41, device=device)
    f[0, 7], f[2, 30] = float("inf"), float("nan")
    triples = tc.zip_with(lambda v, w: (v, w, v > 500)) >> tc.scan(
        lambda a, b, c, d, e, g: (tc.maximum(a, d), b + e, c | g), identity=(-2**31, 0.0, False), axis=1)
    recurrence = tc.library.linear_recurrence(axis=1) >> tc.map(lambda h, decays: h)
    source = triples.source(x, f)
    assert "tc_put_status16(flags, slot, ready" in source and 'sem="release"' not in source
    decays = torch.rand(3, 41, device=device)
    with schedule_overrides(**tiles):
        running, sums, seen = triples(x, f)
        state = recurrence(f.nan_to_num(0.0, 0.0, 0.0), decays)
    assert torch.equal(running.cpu(), torch.cummax(x.cpu(), 1).values)
    torch.testing.assert_close(sums.cpu(), torch.cumsum(f.cpu(), 1), rtol=1e-5, atol=1e-5, equal_nan=True)
    assert torch.equal(seen.cpu(), torch.cummax((x.cpu() > 500).int(), 1).values.bool())
    want = torch.zeros(3, dtype=torch.float64)
    for k, (v, d) in enumerate(zip(f.cpu().nan_to_num(0.0, 0.0, 0.0).double().T, decays.cpu().double().T)):
        want = want * d + v
        torch.testing.assert_close(state[:, k].cpu().double(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("tiles", [LOOKBACK_TILES, {**LOOKBACK_TILES, "PUBLISH_PREFIX": False}],
                         ids=["prefixes", "aggregates-only"])
def test_look_back_of_wide_fields_and_four_fields_publishes_values_beside_a_fenced_status_word(tiles, device):
    """A float64 cumsum and a scan of four fields cannot pack their values with the status: the values are
    stored, then the status word released (and read in the other order). Each field matches torch's."""
    f = torch.randn(3, 41, device=device)
    quads = tc.map(lambda v: (v, v, v, v)) >> tc.scan(
        lambda a, b, c, d, e, g, h, i: (a + e, tc.maximum(b, g), tc.minimum(c, h), i), axis=1)
    wide = tc.cumsum(axis=1)
    for source in (quads.source(f), wide.source(f.double())):
        assert 'tl.atomic_xchg(flags + slot, (ready).to(tl.int64), mask=row_mask, sem="release")' in source
    with schedule_overrides(**tiles):
        sums, highs, lows, last = quads(f)
        sums64 = wide(f.double())
    torch.testing.assert_close(sums.cpu(), torch.cumsum(f.cpu(), 1), rtol=1e-5, atol=1e-5)
    assert torch.equal(highs.cpu(), torch.cummax(f.cpu(), 1).values)
    assert torch.equal(lows.cpu(), torch.cummin(f.cpu(), 1).values)
    assert torch.equal(last.cpu(), f.cpu())
    torch.testing.assert_close(sums64.cpu(), torch.cumsum(f.cpu().double(), 1), rtol=1e-12, atol=1e-12)


def test_look_back_is_not_used_when_a_row_fits_one_tile(device):
    """A rank-0 scan (one element) with the look-back asked for: one tile per row has nothing to look back at, so
    the plan scans in place (compiled, this kernel crashed Triton 3.6's coalescing pass)."""
    pipe = tc.parse("zip_with maximum | scan minimum(axis=0, reverse=True) | zip_with add | map square")
    a = torch.tensor(1.5, dtype=torch.float64, device=device)
    b = torch.tensor(3, dtype=torch.uint8, device=device)
    c = torch.tensor(-2, dtype=torch.int8, device=device)
    with schedule_overrides(**LOOKBACK_TILES):
        assert pipe(a, b, c).item() == 1.0  # (max(1.5, 3) - 2) ** 2
        assert_matches_torch(tc.cumsum(axis=1), torch.randn(5, 3, device=device))


# ---- lagged reads: an input read some places back along the scanned axis (Lag; derivative rules build them) ----

def _lagged_pipeline(reverse: bool, exclusive: bool, by: int, axis: int):
    """``zip_with add`` of x and y lagged, a scan by add, ``zip_with mul`` of the result and z lagged: a lag in
    each phase of the kernel (loaded with the tiles the scan reads, and after it with the tiles it writes)."""
    from tricomb.pipeline.ir import Lag, PipelineIR, Scan, ZipWith
    from tricomb.scalar.ir import Arg, Call, Function
    add = Function(2, (Call("add", (Arg(0), Arg(1))),), "add")
    mul = Function(2, (Call("mul", (Arg(0), Arg(1))),), "mul")
    scan = Scan(tc.cumsum().ir.stages[0].op, axis, None, reverse, exclusive)
    return PipelineIR((ZipWith(add, lags=(Lag(1, axis, by, 2.5),)), scan, ZipWith(mul, lags=(Lag(0, axis, by, -1.0),))))


@pytest.mark.parametrize("tiles", TILES, ids=["heuristic", "tiny-tiles", "look-back"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
@pytest.mark.parametrize("by, axis", [(1, 1), (-1, 1), (3, 0)])
def test_lagged_inputs_read_the_places_back_along_the_axis_with_the_fill_outside(device, tiles, reverse, exclusive,
                                                                                 by, axis):
    from tricomb.pipeline.evaluate import evaluate_fields
    from tricomb.runtime.operator import run_fields
    ir = _lagged_pipeline(reverse, exclusive, by, axis)
    gen = torch.Generator().manual_seed(by + 3 * axis)
    x, y = (torch.randn(9, 21, generator=gen) for _ in range(2))
    z = torch.randn(21, 9, generator=gen).t()  # read through its strides
    with schedule_overrides(**tiles), count_launches() as launches:
        got = run_fields(ir, tuple(t.to(device) for t in (x, y, z)))[0]
    assert launches.triton == 1
    want = evaluate_fields(ir, [x.double(), y.double(), z.double()])[0]
    torch.testing.assert_close(got.cpu().double(), want, rtol=1e-5, atol=1e-5)


def test_lagged_reads_follow_the_torch_meaning():
    """The oracle's meaning of a lag, on a small case written out: element i reads i - by, the fill outside."""
    from tricomb.pipeline.evaluate import lagged
    from tricomb.pipeline.ir import Lag
    t = torch.arange(8.0).reshape(2, 4)
    assert lagged(t, Lag(0, 1, 1, -5.0)).tolist() == [[-5.0, 0, 1, 2], [-5.0, 4, 5, 6]]
    assert lagged(t, Lag(0, -1, -2, 0.0)).tolist() == [[2.0, 3, 0, 0], [6.0, 7, 0, 0]]
    assert lagged(t, Lag(0, 0, 1, 9.0)).tolist() == [[9.0] * 4, [0.0, 1, 2, 3]]


@pytest.mark.parametrize("lag, words", [
    ({"axis": 0}, "needs a scan along that axis"),
    ({"input": 2}, "names input 2 of a zip_with that brings in 1"),
])
def test_a_lag_that_no_scan_kernel_reads_is_refused(lag, words):
    import dataclasses
    from tricomb.errors import UnsupportedError
    from tricomb.pipeline.verify import verify
    ir = _lagged_pipeline(False, False, 1, 1)
    last = ir.stages[-1]
    bad = dataclasses.replace(last, lags=(dataclasses.replace(last.lags[0], **lag),))
    with pytest.raises(UnsupportedError, match=words):
        verify(dataclasses.replace(ir, stages=ir.stages[:-1] + (bad,)))
    without_scan = dataclasses.replace(ir, stages=(ir.stages[0],))
    with pytest.raises(UnsupportedError, match="needs a scan along that axis"):
        verify(without_scan)
