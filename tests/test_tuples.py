"""Tuple streams: a map or zip_with may return several values; later stages take them as arguments; a tuple
result is a tuple of tensors, each with torch's own dtype, shape and layout, all from one kernel."""
import math

import pytest
import torch

import tricomb as tc
from tricomb.testing import assert_matches_torch, count_launches, schedule_overrides


def test_fields_flow_into_later_stages_in_one_kernel(device):
    x = torch.randn(5, 7, device=device)
    b = torch.randn(7, device=device)
    pipe = (tc.map(lambda v: (v, tc.exp(v), v > 0))
            >> tc.map(lambda v, e, positive: (tc.where(positive, v, e - 1.0), e))
            >> tc.zip_with(lambda elu, e, bias: (elu + bias, e * bias)))
    assert pipe.num_inputs == 2
    pipe(x, b)  # the first call emits the module (torch probes dtypes on one-element samples then)
    with count_launches() as launches:
        result = pipe(x, b)
    assert launches.triton == 1 and not launches.torch_ops
    elu, scaled = assert_matches_torch(pipe, x, b, result=result)
    xc, bc = x.cpu(), b.cpu()
    torch.testing.assert_close(elu.cpu(), torch.where(xc > 0, xc, xc.exp() - 1) + bc)
    torch.testing.assert_close(scaled.cpu(), xc.exp() * bc)


def test_each_field_has_its_own_dtype(device):
    x = torch.arange(-3, 4, dtype=torch.int32, device=device)
    doubled, positive, half = tc.map(lambda v: (v * 2, v > 0, v / 2))(x)
    assert (doubled.dtype, positive.dtype, half.dtype) == (torch.int32, torch.bool, torch.float32)
    assert_matches_torch(tc.map(lambda v: (v * 2, v > 0, v / 2)), x)


def test_a_field_from_some_inputs_keeps_their_shape(device):
    """torch returns ``x`` itself at x's shape, not broadcast against y: each field is stored at the broadcast of
    the inputs it is computed from, once per element."""
    x = torch.randn(3, 1, 4, device=device)
    y = torch.randn(5, 4, device=device)
    pipe = tc.zip_with(lambda a, b: (a * 2.0, b + 1.0, a * b, 7.0))
    out = assert_matches_torch(pipe, x, y)
    assert [tuple(o.shape) for o in out] == [(3, 1, 4), (5, 4), (3, 5, 4), (3, 5, 4)]
    single = tc.zip_with(lambda a, b: a)(x, y)
    assert single.shape == x.shape and torch.equal(single.cpu(), x.cpu())


def test_tuple_after_a_reduce(device):
    x = torch.randn(6, 9, device=device)
    assert_matches_torch(tc.sum(axis=1) >> tc.map(lambda s: (s, s * s)), x)


def test_out_takes_a_tuple_for_a_tuple_result(device):
    x = torch.randn(4, 3, device=device)
    pipe = tc.map(lambda v: (v + 1.0, v > 0))
    out = (torch.empty(4, 3, device=device), torch.empty(4, 3, dtype=torch.bool, device=device))
    got = pipe(x, out=out)
    assert got[0] is out[0] and got[1] is out[1]
    torch.testing.assert_close(out[0], x + 1)
    with pytest.raises(tc.TricombError, match="out= must be a tuple of 2 tensors"):
        pipe(x, out=out[0])
    with pytest.raises(tc.DTypeError, match=r"out\[1\] has dtype torch.float32"):
        pipe(x, out=(torch.empty(4, 3, device=device), torch.empty(4, 3, device=device)))


PAIRS = tc.zip_with(lambda v, d: (v, d))
LINEAR = tc.scan(lambda v1, d1, v2, d2: (v1 * d2 + v2, d1 * d2), identity=(0.0, 1.0))  # h = d * h + v, on pairs


def test_linear_recurrence_of_an_impulse_is_powers_of_the_decay(device):
    """C12: the pair operator (v1, d1), (v2, d2) -> (v1 * d2 + v2, d1 * d2) is associative but does not commute;
    an impulse through decay 0.9 gives 0.9 ** i, from one kernel."""
    v = torch.zeros(256, device=device)
    v[0] = 1.0
    d = torch.full((256,), 0.9, device=device)
    with count_launches() as launches:
        values, decays = (PAIRS >> LINEAR)(v, d)
    assert launches.triton == 1 and launches.total == 1
    assert values[64].item() == pytest.approx(1.1790164e-3, rel=1e-5)
    assert values[255].item() == pytest.approx(2.1470241e-12, rel=1e-5)
    assert decays[255].item() == pytest.approx(0.9 ** 256, rel=1e-4)
    assert_matches_torch(PAIRS >> LINEAR, v, d)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
def test_tuple_scans_any_axis_and_direction(axis, reverse, exclusive, device):
    v, d = torch.randn(9, 37, device=device), torch.rand(9, 37, device=device)
    scan = tc.scan(lambda v1, d1, v2, d2: (v1 * d2 + v2, d1 * d2), axis=axis, reverse=reverse,
                   exclusive=exclusive, identity=(0.0, 1.0))
    assert_matches_torch(PAIRS >> scan, v, d)


def test_cummax_with_its_index_is_a_scan_of_pairs(device):
    """torch.cummax: the running maximum and the index where it was seen (the latest on ties)."""
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, 5.0, 5.0, -1.0], [0.0, 0.0, -2.0, 4.0, 4.0, 9.0, 1.0]], device=device)
    positions = torch.arange(7, device=device)
    later_if_not_smaller = tc.scan(lambda v1, i1, v2, i2: (tc.where(v2 >= v1, v2, v1), tc.where(v2 >= v1, i2, i1)),
                                   identity=(-math.inf, -1))
    values, indices = (PAIRS >> later_if_not_smaller)(x, positions)
    want = torch.cummax(x.cpu(), 1)
    assert torch.equal(values.cpu(), want.values) and torch.equal(indices.cpu(), want.indices)
    assert indices.dtype == torch.int64


@pytest.mark.parametrize("split", [None, 3])
def test_tuple_reduce_sum_and_sum_of_squares_then_variance(split, device):
    """A reduce on pairs, then a map of both fields: the population variance in one pass over the data, on the
    split-row path too (rows shared by 3 programs, combined by the last one)."""
    x = torch.randn(6, 500, device=device, dtype=torch.float64)
    sums = (tc.map(lambda v: (v, v * v))
            >> tc.reduce(lambda s1, q1, s2, q2: (s1 + s2, q1 + q2), axis=1, identity=(0.0, 0.0))
            >> tc.map(lambda s, q: q / 500 - (s / 500) * (s / 500)))
    overrides = {} if split is None else {"SPLIT": split, "BLOCK_K": 16}
    with schedule_overrides(**overrides):
        got = sums(x)
    torch.testing.assert_close(got.cpu(), x.cpu().var(1, unbiased=False))
    with schedule_overrides(**overrides):
        assert_matches_torch(sums, x)


def test_tuple_reduce_fields_keep_their_own_dtypes(device):
    """Each accumulator field has the dtype the operator gives it: a count in int64 beside a float sum."""
    x = torch.randn(4, 33, device=device)
    counted = (tc.map(lambda v: (v, v > 0))
               >> tc.map(lambda v, positive: (tc.where(positive, v, 0.0), positive * 1))
               >> tc.reduce(lambda s1, n1, s2, n2: (s1 + s2, n1 + n2), axis=-1, keepdim=True, identity=(0.0, 0)))
    total, count = counted(x)
    assert total.dtype == torch.float32 and count.dtype == torch.int64 and count.shape == (4, 1)
    assert torch.equal(count.cpu(), (x.cpu() > 0).sum(-1, keepdim=True))
    assert_matches_torch(counted, x)


def test_tuple_functions_print_as_tuples():
    assert str(tc.map(lambda v: (v, v * 2))) == "map (x -> (x, (x * 2)))"


def _argmax_step(av, ai, bv, bi):
    a_nan, b_nan = tc.ne(av, av), tc.ne(bv, bv)
    tie = tc.logical_or(tc.eq(av, bv), tc.logical_and(a_nan, b_nan))
    take_a = tc.logical_or(tc.logical_or(tc.gt(av, bv), tc.logical_and(a_nan, tc.eq(bv, bv))),
                           tc.logical_and(tie, tc.lt(ai, bi)))
    return tc.where(take_a, av, bv), tc.where(take_a, ai, bi)


@pytest.mark.parametrize("block_k", [None, 2])
def test_a_user_operator_like_a_builtin_one_is_the_users(block_k):
    """A user's operator with the body of the builtin argmax step keeps its own folds: its positions may be
    int32 (the builtin's sentinel is int64), and value and position come from one element (the builtin's native
    tile fold takes the extreme value and the smallest position holding it apart)."""
    from tricomb.scalar.builtins import TUPLE_OPS
    pipe = tc.zip_with(lambda v, i: (v, i)) >> tc.reduce(_argmax_step, identity=(-math.inf, 2 ** 31 - 1), axis=1)
    assert pipe.ir.stages[-1].op == TUPLE_OPS["argmax"].function  # equal, as far as equality goes
    values = torch.tensor([[-1.0, 0.0, -0.0, -1.0], [2.0, 1.0, 2.0, 0.0]])
    positions = torch.arange(4, dtype=torch.int32).expand(2, 4)
    with schedule_overrides(**({} if block_k is None else {"BLOCK_K": block_k})):
        got_values, got_positions = pipe(values, positions)
    assert got_positions.tolist() == [1, 0] and got_positions.dtype == torch.int32
    assert [math.copysign(1.0, v) for v in got_values.tolist()] == [1.0, 1.0]  # element 1 is +0.0
