"""tricomb.library: named pipelines built only from combinators, each one kernel, against torch's functions."""
import math

import pytest
import torch

import tricomb as tc
from tricomb.testing import assert_matches_torch, schedule_overrides

from conftest import one_launch

L = tc.library
inf, nan = math.inf, math.nan


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("axis,keepdim", [(1, False), (0, True), (None, False), ((0, 1), True)])
def test_var_and_std_as_torch(dtype, axis, keepdim, device):
    """One pass of Welford merges; stable where the sum-of-squares formula cancels (mean 1000, spread 1)."""
    x = (torch.randn(9, 130, dtype=torch.float64) + 1000.0).to(dtype).to(device)
    dims = axis if axis is not None else (0, 1)
    for correction in (1, 0):
        want = torch.var(x.cpu().double(), dim=dims, keepdim=keepdim, correction=correction)
        got = one_launch(L.var(axis=axis, keepdim=keepdim, correction=correction), x)
        assert got.dtype == dtype and got.shape == want.shape
        tol = {torch.float16: 2e-2, torch.float32: 2e-4, torch.float64: 1e-9}[dtype]  # (mean 1000: kappa 1e6)
        torch.testing.assert_close(got.cpu().double(), want, rtol=tol, atol=tol)
        torch.testing.assert_close(L.std(axis=axis, keepdim=keepdim, correction=correction)(x).cpu().double(),
                                   want.sqrt(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype, big", [(torch.float32, 1.2e19), (torch.float64, 9e153)])
@pytest.mark.parametrize("tiles", [{}, {"BLOCK_K": 2, "SPLIT": 2}], ids=["heuristic", "split-rows"])
def test_var_and_std_of_values_whose_squares_overflow(dtype, big, tiles, device):
    """Values whose differences' squares pass the dtype's largest number, where the sum of squared deviations
    does not: no NaN from an empty side's count times an infinite square, and the spread as torch's."""
    x = torch.tensor([[big, big, big], [big, -big, 0.0]], dtype=dtype, device=device)
    with schedule_overrides(**tiles):
        for pipe, ref in ((L.var(axis=1), torch.var), (L.std(axis=1), torch.std)):
            want = ref(x.cpu().double(), dim=1)
            torch.testing.assert_close(pipe(x).cpu().double(), want, rtol=1e-5, atol=0)


def test_logsumexp_and_softmax_denominators_as_torch(device):
    x = torch.randn(7, 300, device=device) * 20
    got = one_launch(L.logsumexp(axis=1), x)
    torch.testing.assert_close(got.cpu(), torch.logsumexp(x.cpu(), 1))
    edge = torch.tensor([[-inf, -inf, -inf], [inf, 1.0, 2.0], [nan, 1.0, 2.0], [1.0, -inf, 3.0]], device=device)
    torch.testing.assert_close(L.logsumexp(axis=-1)(edge).cpu(), torch.logsumexp(edge.cpu(), -1), equal_nan=True)
    with schedule_overrides(BLOCK_K=4, SPLIT=3):
        m, s = L.softmax_denominators(axis=1, keepdim=True)(x)
    torch.testing.assert_close(m.cpu(), x.cpu().amax(1, keepdim=True))
    torch.testing.assert_close(s.cpu(), torch.exp(x.cpu() - m.cpu()).sum(1, keepdim=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_softmax_from_its_denominators_as_torch_on_infinite_rows(dtype, device):
    """The guide's softmax, exp(x - m) / s of softmax_denominators, is torch.softmax on rows holding +inf (once,
    several times, beside -inf or NaN), only -inf, some -inf, and none: NaN wherever torch's is."""
    rows = [[1.0, 2.0, inf, 0.5], [inf, 1.0, inf, -3.0], [inf, -inf, 1.0, 2.0], [-inf, -inf, -inf, -inf],
            [1.0, -inf, 2.0, -inf], [-inf, 0.0, -inf, -inf], [nan, 1.0, inf, 2.0], [-inf, nan, -inf, -inf],
            [inf, inf, inf, inf], [1.0, 2.0, 3.0, 4.0]]
    x = torch.tensor(rows, dtype=dtype, device=device)
    want = torch.softmax(x.cpu().float(), -1).to(dtype)
    softmax = tc.zip_with(lambda v, m, s: tc.exp(v - m) / s)
    layouts = [({}, x, 1)] + ([({"BLOCK_K": 2, "SPLIT": 2}, x, 1), ({}, x.t(), 0)] if dtype == torch.float32 else [])
    for tiles, v, axis in layouts:  # (split rows; the rows as strided columns)
        with schedule_overrides(**tiles):
            m, s = L.softmax_denominators(axis=axis, keepdim=True)(v)
        got = softmax(v, m, s)
        torch.testing.assert_close((got if axis == 1 else got.t()).cpu(), want, equal_nan=True)
    assert L.softmax_denominators(axis=1)(torch.empty(2, 0, device=device))[1].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("order", [1, 2, inf, 3.5])
def test_norm_as_torch(order, device):
    x = torch.randn(5, 64, device=device)
    got = L.norm(order, axis=1, keepdim=True)(x)
    torch.testing.assert_close(got.cpu(), torch.linalg.vector_norm(x.cpu(), order, 1, keepdim=True))
    with pytest.raises(tc.ArgumentError, match="ord must be a positive number"):
        L.norm(0)


def test_linear_recurrence_and_ema_against_a_loop(device):
    v, d = torch.randn(3, 200, device=device), torch.rand(3, 200, device=device)
    h, decay = one_launch(L.linear_recurrence(), v, d)
    state, want = torch.zeros(3, dtype=torch.float64), []
    for t in range(200):
        state = d.cpu()[:, t].double() * state + v.cpu()[:, t].double()
        want.append(state)
    torch.testing.assert_close(h.cpu().double(), torch.stack(want, 1), rtol=1e-5, atol=1e-5)
    assert_matches_torch(L.linear_recurrence(axis=0, reverse=True), v, d)
    x = torch.randn(500, device=device)
    y = one_launch(L.ema(0.1), x)
    state, want = 0.0, []
    for value in x.cpu().tolist():
        state = 0.1 * value + 0.9 * state
        want.append(state)
    torch.testing.assert_close(y.cpu().double(), torch.tensor(want, dtype=torch.float64), rtol=1e-5, atol=1e-5)
    with pytest.raises(tc.ArgumentError, match=r"alpha must be a number in \(0, 1\]"):
        L.ema(1.5)


def test_library_operators_are_declared_not_sampled():
    """The Welford merge is associative for the counts it meets (never negative); the sample of all reals makes
    negative counts cancel to 0, so the law check would refuse it: its laws are declared, with their source."""
    with pytest.raises(tc.LawError, match="not associative"):
        tc.check_laws(L.WELFORD, (0.0, 0.0, 0.0))
    L.var(axis=0)  # builds: its laws are declared, not sampled (sampling would raise the LawError above)


def test_logsumexp_folds_whole_tiles_by_its_declared_share_with_the_pair_combines_results(device):
    """softmax_denominators' reduce takes elements in by whole tiles (the tile's max, then the sum of each
    element's declared share: one exp) instead of lifting each to (x, 1) and applying the pair combine (two exps);
    the results are the pair combine's, special values included, on tiny tiles, split rows and every float
    dtype."""
    from tricomb.pipeline.online import LOG_SUM_EXP
    x = torch.randn(6, 37, device=device) * 30
    x[0] = -inf
    x[1, 5], x[1, 9] = inf, inf
    x[2, 3] = nan
    x[3, :] = 2.5  # equal maxima everywhere
    x[4, 7] = -inf
    library = L.softmax_denominators(axis=1)
    pairs = tc.map(lambda v: (v * 1.0, tc.where(v == v, 1.0, v * 1.0 + 0.0))) >> tc.reduce(
        LOG_SUM_EXP, axis=1, identity=(-inf, 0.0))  # the same operator, a lift with no declared share
    assert library.explain(x).kernel_plan.folds[0].share is not None and pairs.explain(x).kernel_plan.folds[0].share is None
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32):
        v = x.to(dtype) if dtype.is_floating_point else x.nan_to_num(0.0, 99.0, -99.0).to(dtype)
        for tiles in ({}, {"BLOCK_K": 4, "SPLIT": 3}, {"BLOCK_K": 8}):
            with schedule_overrides(**tiles):
                (m, s), (m2, s2) = library(v), pairs(v)
            s2 = torch.where(m2.isinf() & (s2 != 0), nan, s2)  # torch's sum of exp(x - m) at an infinite m
            torch.testing.assert_close(m, m2, equal_nan=True, rtol=0, atol=0)
            torch.testing.assert_close(s, s2, equal_nan=True, rtol=1e-5, atol=0)
    want = torch.logsumexp(x.cpu(), 1)
    torch.testing.assert_close(L.logsumexp(axis=1)(x).cpu(), want, equal_nan=True)
    columns = x.t()  # the reduced axis strided: tiles of columns
    for tiles in ({}, {"BLOCK_K": 2, "SPLIT": 2}):
        with schedule_overrides(**tiles):
            torch.testing.assert_close(L.logsumexp(axis=0)(columns).cpu(), want, equal_nan=True)


def _users_logsumexp_step(m1, s1, m2, s2):
    m = tc.maximum(m1, m2)
    return m, tc.where(m1 == m, s1, s1 * tc.exp(m1 - m)) + tc.where(m2 == m, s2, s2 * tc.exp(m2 - m))


def test_a_users_online_normalizer_gets_a_derived_share(device):
    """A user's own logsumexp pair (an operator that commutes, field 0 by maximum, field 1s adding at equal
    maxima, identity (-inf, 0)) after a lift (v, c(v)) folds whole tiles by the share derived from it, with the
    results of the pair combine (the same reduce after a lift of another shape), special values included, on tiny
    tiles and split rows."""
    x = torch.randn(6, 37, device=device) * 30
    x[0] = -inf
    x[1, 5], x[1, 9] = inf, inf
    x[2, 3] = nan
    x[3, :] = 2.5
    reduce = tc.reduce(_users_logsumexp_step, axis=1, identity=(-inf, 0.0))
    derived = tc.map(lambda v: (v, tc.where(v == v, 1.0, v))) >> reduce
    pairs = tc.map(lambda v: (v * 1.0, tc.where(v == v, 1.0, v * 1.0 + 0.0))) >> reduce
    assert derived.explain(x).kernel_plan.folds[0].share is not None
    assert pairs.explain(x).kernel_plan.folds[0].share is None
    for tiles in ({}, {"BLOCK_K": 4, "SPLIT": 3}, {"BLOCK_K": 8}):
        with schedule_overrides(**tiles):
            (m, s), (m2, s2) = derived(x), pairs(x)
        torch.testing.assert_close(m, m2, equal_nan=True, rtol=0, atol=0)
        torch.testing.assert_close(s, s2, equal_nan=True, rtol=1e-5, atol=0)


def test_a_derived_share_is_for_float_maxima_and_keeps_field_0_exact():
    """No share for integer maxima (the shares' float sum would round them: 2**31 - 1 came back as INT_MIN); a
    share that is NaN at a number (here inf * exp(-198) at x = 2) leaves field 0 the largest element."""
    ints = torch.tensor([[16777217, 5, 3], [2 ** 31 - 1, 0, 1], [-7, -3, -3]], dtype=torch.int32)
    reduce = tc.reduce(_users_logsumexp_step, axis=1, identity=(-inf, 0.0))
    pipe = tc.map(lambda v: (v, tc.where(v == v, 1.0, v * 1.0))) >> reduce
    assert pipe.explain(ints).kernel_plan.folds[0].share is None
    assert pipe(ints)[0].tolist() == [16777217, 2 ** 31 - 1, -3]
    x = torch.tensor([[2.0, 200.0], [2.0, inf]])
    pipe = tc.map(lambda v: (v, 1.0 / (v - 2.0))) >> reduce
    assert pipe.explain(x).kernel_plan.folds[0].share is not None
    assert pipe(x)[0].tolist() == [200.0, inf]


@pytest.mark.parametrize("lift, op, identity", [
    # field 1 does not add at equal maxima
    (lambda v: (v, v * 0.0 + 1.0), lambda m1, s1, m2, s2: (tc.maximum(m1, m2), s1 + s2 + s1 * s2), (-inf, 0.0)),
    # adds, but its share is no NaN where x is (a tile's maximum skips NaN)
    (lambda v: (v, tc.where(v == v, 1.0, 1.0)), lambda m1, s1, m2, s2: (tc.maximum(m1, m2), s1 + s2), (-inf, 0.0)),
    # field 0 is no maximum
    (lambda v: (v, v * 0.0 + 1.0), lambda m1, s1, m2, s2: (tc.minimum(m1, m2), s1 + s2), (inf, 0.0)),
    # adds at equal maxima only for field 1s that are not negative
    (lambda v: (v, tc.where(v == v, -1.0, v)), lambda m1, s1, m2, s2: (
        tc.maximum(m1, m2), tc.where(m1 > m2, s1, tc.where(m2 > m1, s2, tc.where(
            tc.maximum(m1, m2) == -inf, s1 + s2, tc.abs(s1) + tc.abs(s2))))), (-inf, 0.0)),
])
def test_no_share_is_derived_where_the_laws_do_not_make_one(lift, op, identity):
    x = torch.randn(4, 9)
    x[1, 2] = nan
    pipe = tc.map(lift) >> tc.reduce(op, axis=1, identity=identity)
    assert pipe.explain(x).kernel_plan.folds[0].share is None
    assert_matches_torch(pipe, x)


def test_every_declared_share_is_its_operators_sum_at_a_maximum():
    """The contract a declared share promises (declare_share), checked by torch in float64 on every pair of
    special and ordinary values with x <= m: share(m, x) is field 1 of op((m, 0), lift(x)), field 0 of that is m,
    and the share is NaN exactly where x or m is."""
    from tricomb.pipeline.evaluate import evaluate_function
    from tricomb.pipeline.operators import _SHARES
    values = torch.tensor([-inf, -1e30, -88.0, -3.5, -1.0, -0.0, 0.0, 1e-30, 2.0, 20.0, 88.0, 1e30, inf, nan],
                          dtype=torch.float64)
    m, x = (t.reshape(-1) for t in torch.meshgrid(values, values, indexing="ij"))
    keep = ~(x > m)  # x <= m, and the pairs with a NaN
    m, x = m[keep], x[keep]
    assert _SHARES
    for (lift, op, identity), share in _SHARES.items():
        lifted = evaluate_function(lift, [x])
        combined = evaluate_function(op, [m, torch.zeros_like(m), *lifted])
        got = evaluate_function(share, [m, x])[0]
        torch.testing.assert_close(got, combined[1], equal_nan=True, rtol=1e-15, atol=0)
        torch.testing.assert_close(combined[0], torch.where(x != x, x, m), equal_nan=True, rtol=0, atol=0)
        assert torch.equal(got.isnan(), m.isnan() | x.isnan())
