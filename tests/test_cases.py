"""Faults other libraries shipped (../shared/CASES.md), as tests holding torch's value, dtype and shape.

C12 (a scan of pairs) is in test_tuples.py, with the other tuple streams; C18 needs more than 2**31 elements and
runs on the GPU only.
"""
import math

import pytest
import torch

import tricomb as tc
import tricomb.testing

nan, inf = math.nan, math.inf


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    torch.testing.assert_close(got.cpu(), want.cpu(), equal_nan=True, rtol=0, atol=0)


def test_c01_nan_in_max_and_min(device):
    x = torch.tensor([1.0, nan, 3.0], device=device)
    twice = tc.map(lambda v: v * 2)
    _same((twice >> tc.max())(x), torch.tensor(nan))
    _same((twice >> tc.min())(x), torch.tensor(nan))
    rows = torch.tensor([[1.0, nan], [3.0, 4.0]], device=device)
    _same(tc.max(axis=1)(rows), torch.tensor([nan, 4.0]))


def test_c02_nan_in_argmax_and_argmin(device):
    def index(stage, values):
        return stage(torch.tensor(values, device=device))
    _same(index(tc.argmax(), [nan, 6.0, 8.0]), torch.tensor(0))
    _same(index(tc.argmax(), [6.0, nan, 8.0, nan]), torch.tensor(1))
    _same(index(tc.argmin(), [nan, 6.0, 8.0]), torch.tensor(0))
    _same(index(tc.argmax(), [0.0, 1.0, nan]), torch.tensor(2))
    _same(index(tc.argmax(), [nan, nan, nan]), torch.tensor(0))


def test_c03_inf_in_a_scan_carry_stays_inf(device):
    for n in (100, 10, 100, 1000):  # one process, several sizes: no stale carry between launches
        ones = torch.full((n,), inf, dtype=torch.float64, device=device)
        got = tc.cumsum()(ones)
        assert bool(torch.isinf(got).all()) and not bool(torch.isnan(got).any())
        _same(tc.sum()(got), torch.tensor(inf, dtype=torch.float64))  # a scan then a reduce: two pipelines, for now


def test_c04_minus_inf_in_a_log_add_exp_scan(device):
    x = torch.tensor([[2, -inf, -inf, 1, -inf, -inf, 3], [2, 1, -inf, 1, -inf, -inf, 3]], device=device)
    got = tc.scan(tc.logaddexp, axis=1)(x).cpu()
    want = torch.tensor([[2, 2, 2, 2.3132617, 2.3132617, 2.3132617, 3.407606],
                         [2, 2.3132617, 2.3132617, 2.5514448, 2.5514448, 2.5514448, 3.4938116]])
    torch.testing.assert_close(got, want)
    _same(tc.scan(tc.logaddexp)(torch.tensor([-inf, -inf, 0.0], device=device)), torch.tensor([-inf, -inf, 0.0]))


def test_c05_nan_skipping_sum(device):
    _same(tc.nansum()(torch.tensor([0, 2.5, nan, 7.5, 10], device=device)), torch.tensor(20.0))


def test_c05_nan_skipping_mean_counts_only_numbers(device):
    """nanmean, as torch.nanmean: the NaN-free elements' mean; NaN for a row of NaN; float16 kept."""
    x = torch.tensor([[0, 2.5, nan, 7.5, 10], [nan] * 5, [1, 2, 3, 4, 5]], device=device)
    _same(tc.nanmean(axis=1)(x), torch.tensor([5.0, nan, 3.0]))
    _same(tc.nanmean()(x.half()), torch.nanmean(x.cpu().half()))
    with tricomb.testing.schedule_overrides(SPLIT=3, BLOCK_K=4):
        _same(tc.nanmean(axis=1, keepdim=True)(x.repeat(1, 40)), torch.nanmean(x.cpu().repeat(1, 40), 1, True))


def test_c06_empty_reductions(device):
    _same(tc.sum()(torch.empty(0, device=device)), torch.tensor(0.0))
    _same(tc.sum()(torch.empty(1, 0, dtype=torch.bool, device=device)), torch.tensor(0))
    _same(tc.sum(axis=0)(torch.empty(0, 3, device=device)), torch.zeros(3))
    _same(tc.prod()(torch.empty(0, device=device)), torch.tensor(1.0))
    _same(tc.all()(torch.empty(0, dtype=torch.bool, device=device)), torch.tensor(True))
    _same(tc.any()(torch.empty(0, dtype=torch.bool, device=device)), torch.tensor(False))
    with pytest.raises(tc.StageError, match="zero-size"):
        tc.max()(torch.empty(0, device=device))


def test_c07_empty_scans_launch_nothing(device):
    from tricomb.testing import count_launches
    ints = torch.empty(0, dtype=torch.int32, device=device)
    rows = torch.empty(0, 4, device=device)
    with count_launches() as launches:
        _same(tc.cumsum()(ints), torch.empty(0, dtype=torch.int64))
        _same(tc.cumsum(axis=1)(rows), torch.empty(0, 4))
    assert launches.triton == 0


def test_c08_mean_of_nothing_is_nan(device):
    _same(tc.mean()(torch.empty(0, device=device)), torch.tensor(nan))


def test_c09_bool_and_int_scans_promote_to_int64(device):
    ones = torch.ones(2, 4, dtype=torch.int64, device=device)
    got = (tc.map(lambda v: v != 0) >> tc.scan(tc.add, axis=1))(ones)
    _same(got, torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4]]))
    last = tc.cumsum()(torch.ones(200, dtype=torch.int8, device=device))[-1]
    _same(last, torch.tensor(200))


def test_c19_dtype_argument_is_kept(device):
    ones = torch.ones(2, 4, dtype=torch.bool, device=device)
    _same(tc.cumsum(axis=1, dtype=torch.bfloat16)(ones),
          torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4]], dtype=torch.bfloat16))
    _same(tc.parse("cumsum(axis=1, dtype=bfloat16)")(ones), torch.cumsum(ones.cpu(), 1, dtype=torch.bfloat16))


def test_c10_half_precision_accumulates_in_float32(device):
    f16 = torch.tensor([2048.0] + [1.0] * 2048, dtype=torch.float16, device=device)
    _same(tc.sum()(f16), torch.tensor(4096.0, dtype=torch.float16))
    bf16 = torch.tensor([256.0] + [1.0] * 256, dtype=torch.bfloat16, device=device)
    _same(tc.sum()(bf16), torch.tensor(512.0, dtype=torch.bfloat16))
    _same(tc.mean()(f16), torch.tensor(1.9990234, dtype=torch.float16))
    _same(tc.sum()(torch.ones(65536, dtype=torch.float16, device=device)), torch.tensor(inf, dtype=torch.float16))


@pytest.mark.parametrize("tiles", [{}, {"BLOCK_M": 2, "BLOCK_K": 4, "SPLIT": 3}], ids=["heuristic", "split-rows"])
def test_c11_argmax_ties_take_the_first_index(device, tiles):
    with tc.testing.schedule_overrides(**tiles):
        _same(tc.argmax()(torch.tensor([1, 5, 2, 5, 5, 0, 5], dtype=torch.int32, device=device)), torch.tensor(1))
        _same(tc.argmin()(torch.tensor([3, 0, 2, 0], device=device)), torch.tensor(1))
        grid = torch.tensor([[3, 2, 2], [4, 4, 1], [4, 1, 4]], device=device)
        _same(tc.argmax(axis=0)(grid), torch.tensor([1, 1, 2]))
        spikes = torch.zeros(5000, device=device)
        spikes[[17, 1234, 4999]] = 1.0
        _same(tc.argmax()(spikes), torch.tensor(17))


def test_c13_non_associative_operator_is_refused_pointing_at_the_tuple_form(device):
    with pytest.raises(tc.LawError, match=r"not associative.*\(v1, d1\), \(v2, d2\) -> \(v1 \* d2 \+ v2, d1 \* d2\)"):
        tc.scan(lambda a, b: 0.5 * a + b, identity=0.0)
    # the pointed-at form: h = 0.5 * h + x as (value, decay) pairs
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], device=device)
    linear = tc.zip_with(lambda v, d: (v, d)) >> tc.scan(lambda v1, d1, v2, d2: (v1 * d2 + v2, d1 * d2),
                                                        identity=(0.0, 1.0))
    h, _ = linear(x, torch.full((4,), 0.5, device=device))
    _same(h, torch.tensor([1.0, 2.5, 4.25, 6.125]))


def test_c14_non_power_of_two_sizes(device):
    _same(tc.sum(axis=1)(torch.ones(257, 257, device=device)), torch.full((257,), 257.0))
    _same(tc.sum(axis=0)(torch.ones(33, 64, device=device)), torch.full((64,), 33.0))
    x = torch.arange(196611, dtype=torch.float64, device=device).reshape(65537, 3)
    _same(tc.sum(axis=0)(x), torch.tensor([6442549248.0, 6442614785.0, 6442680322.0], dtype=torch.float64))


def test_c15_broadcast_operand_into_a_long_scan(device):
    x = torch.ones(1, 129, 2, device=device)
    b = torch.tensor([0.0, 1.0], device=device)
    out = (tc.zip_with(tc.add) >> tc.cumsum(axis=1))(x, b)
    assert out.shape == (1, 129, 2)
    _same(out[0, 0], torch.tensor([1.0, 2.0]))
    _same(out[0, 127], torch.tensor([128.0, 256.0]))
    _same(out[0, 128], torch.tensor([129.0, 258.0]))


def test_c16_stride_zero_operands(device):
    x = torch.ones(2, 3, 4, device=device)
    r = torch.arange(1.0, 7.0, device=device).reshape(2, 3, 1).expand(2, 3, 4)
    w = torch.tensor([1.0, 2.0, 3.0, 4.0], device=device)
    product = tc.zip_with(lambda a, b, c: a * b * c)
    _same(product(x, r, w)[1, 2], torch.tensor([6.0, 12.0, 18.0, 24.0]))
    _same((product >> tc.sum())(x, r, w), torch.tensor(210.0))


def test_c21_reverse_scan(device):
    x = torch.arange(18, device=device).reshape(2, 9)
    want = torch.tensor([[36, 36, 35, 33, 30, 26, 21, 15, 8], [117, 108, 98, 87, 75, 62, 48, 33, 17]])
    _same(tc.cumsum(axis=1, reverse=True)(x), want)
    _same(tc.parse("scan add(axis=1, reverse=True)")(x), want)


def test_c20_empty_axis_list_means_all_axes(device):
    _same(tc.sum(axis=())(torch.tensor([1, 2, 3, 4], device=device)), torch.tensor(10))
    _same(tc.parse("sum(axis=())")(torch.tensor([1, 2, 3, 4], device=device)), torch.tensor(10))


def test_c17_several_outputs_of_different_shapes(device):
    x = torch.tensor([1, 2], device=device)
    y = torch.tensor([[3, 4], [5, 6]], device=device)
    first, total = tc.zip_with(lambda a, b: (a, a + b))(x, y)
    _same(first, torch.tensor([1, 2]))
    _same(total, torch.tensor([[4, 6], [6, 8]]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device with about 5 GB free")
def test_c18_offsets_past_2_to_the_31():
    n = 2**31 + 1024
    x = torch.zeros(n, dtype=torch.int8, device="cuda")
    x[2**31] = 3
    x[-1] = 7
    out = tc.map(lambda v: v + 1)(x)
    assert out.dtype == torch.int8 and out.shape == (n,)
    assert (out[2**31 - 1].item(), out[2**31].item(), out[-1].item()) == (1, 4, 8)
    total = tc.sum()(x)
    assert total.dtype == torch.int64 and total.item() == 10
