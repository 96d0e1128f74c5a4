"""The split-row paths at full size on the GPU (the CPU suite reaches them with tiny tiles): whole-array and
few-long-row reductions, whose last program combines the partials in a fixed order, so a result is the same bit
for bit from run to run; and one-pass scans of long rows by the decoupled look-back. Launches of these sizes
are tuned by Triton's autotuner first, so that path runs here too."""
import pytest
import torch

import tricomb as tc

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _runs(pipe, *inputs, times=5):
    return [pipe(*inputs) for _ in range(times)]


@pytest.mark.parametrize("shape,axis", [((1 << 26,), None), ((4, 1 << 24), 1), ((1 << 24, 3), 0)],
                         ids=["whole-array", "four-long-rows", "three-long-columns"])
def test_split_reductions_are_bitwise_the_same_from_run_to_run(shape, axis):
    x = torch.randn(shape, device="cuda")
    for pipe, want in [(tc.sum(axis=axis), x.double().sum(axis) if axis is not None else x.double().sum()),
                       (tc.parse("map softplus | sum") if axis is None else tc.map(tc.softplus) >> tc.sum(axis=axis),
                        torch.nn.functional.softplus(x.double()).sum(axis) if axis is not None
                        else torch.nn.functional.softplus(x.double()).sum())]:
        runs = _runs(pipe, x)
        assert all(torch.equal(r, runs[0]) for r in runs[1:]), f"{pipe}: results differ between runs"
        torch.testing.assert_close(runs[0].double(), want, rtol=1e-4, atol=1e-2)
    assert torch.equal(tc.argmax(axis=axis)(x), torch.argmax(x) if axis is None else torch.argmax(x, axis))


def test_look_back_scans_of_long_rows_match_torch():
    n = 1 << 24
    x = torch.rand(n, device="cuda")
    torch.testing.assert_close(tc.cumsum()(x).double(), torch.cumsum(x.double(), 0), rtol=1e-4, atol=1e-3)
    ints = torch.randint(-1000, 1000, (n,), dtype=torch.int32, device="cuda")
    assert torch.equal(tc.cumsum(dtype=torch.int32)(ints), torch.cumsum(ints, 0, dtype=torch.int32))
    y = torch.randn(n, device="cuda").round()  # many ties: torch gives the latest index
    values, indices = tc.cummax()(y)
    want = torch.cummax(y, 0)
    assert torch.equal(values, want.values) and torch.equal(indices, want.indices)
    rows = torch.rand(3, n // 4, device="cuda")
    got = tc.cumsum(axis=1, reverse=True, exclusive=True)(rows).double()
    want = rows.double().flip(1).cumsum(1).flip(1) - rows.double()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def test_a_linear_recurrence_over_one_long_row_matches_a_float64_scan():
    n = 1 << 20
    v, d = torch.randn(n, device="cuda"), 0.5 + 0.5 * torch.rand(n, device="cuda")
    h, _ = tc.library.linear_recurrence()(v, d)
    ref, state = torch.empty(n, dtype=torch.float64), 0.0
    vs, ds = v.double().cpu().tolist(), d.double().cpu().tolist()
    for i in range(n):
        state = ds[i] * state + vs[i]
        ref[i] = state
    torch.testing.assert_close(h.double().cpu(), ref, rtol=1e-4, atol=1e-4)


def test_a_two_field_look_back_never_mixes_one_tiles_aggregate_with_its_prefix():
    """A pair's values travel beside their status in one 16-byte word, written and read in one access.
    Counting ones and twos over 2^24 elements (exact in float32) shows any mix of a tile's aggregate in one
    field with its prefix in the other, or a value read before it was written. Repeated launches reuse the
    status words."""
    n = 1 << 24
    counts = tc.map(lambda x: (x * 0.0 + 1.0, x * 0.0 + 2.0)) >> tc.scan(lambda a, b, c, d: (a + c, b + d),
                                                                            identity=(0.0, 0.0))
    x = torch.rand(n, device="cuda")
    want = torch.arange(1, n + 1, device="cuda", dtype=torch.float32)
    for _ in range(3):
        ones, twos = counts(x)
        assert torch.equal(ones, want) and torch.equal(twos, 2 * want)


def test_a_look_back_scan_captured_in_a_cuda_graph_replays_right_between_direct_calls():
    """A captured launch replays with the status value it was captured with; its status words are zeroed in
    the graph too, and direct launches in between publish larger values, so neither reads the other's words."""
    n = 1 << 22
    pipe, x = tc.cumsum(), torch.rand(n, device="cuda")
    static_x = torch.rand(n, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        pipe(static_x)  # compiled and tuned before capture, as torch's CUDA graph guide asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = pipe(static_x)
    for _ in range(3):
        static_x.copy_(torch.rand(n, device="cuda"))
        graph.replay()
        torch.testing.assert_close(static_y.double(), torch.cumsum(static_x.double(), 0), rtol=1e-4, atol=1e-3)
        torch.testing.assert_close(pipe(x).double(), torch.cumsum(x.double(), 0), rtol=1e-4, atol=1e-3)


def test_drawdown_of_a_long_series_is_one_kernel_and_exact():
    x = torch.randn(1 << 24, device="cuda").cumsum(0)
    got = tc.parse("scan maximum | zip_with sub | max")(x, x)
    assert torch.equal(got, (torch.cummax(x, 0).values - x).max())
