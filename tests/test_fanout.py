"""tc.fanout: several reductions of one input in one pass, one kernel, each with torch's result dtype and NaN
rules."""
import pytest
import torch

import tricomb as tc
from tricomb.testing import assert_matches_torch, count_launches, schedule_overrides


@pytest.mark.parametrize("tiles", [{}, {"BLOCK_K": 4, "SPLIT": 3}], ids=["heuristic", "split-rows"])
def test_sum_max_min_prod_of_integers_in_one_kernel(tiles, device):
    x = torch.randint(-3, 4, (4, 130), dtype=torch.int32, device=device)
    pipe = tc.fanout(tc.sum(axis=1), tc.max(axis=1), tc.min(axis=1), tc.prod(axis=1))
    with schedule_overrides(**tiles):
        pipe(x)
        with count_launches() as launches:
            total, high, low, product = pipe(x)
    assert launches.triton == 1 and launches.total == 1
    c = x.cpu()
    assert total.dtype == torch.int64 and high.dtype == torch.int32 and product.dtype == torch.int64
    for got, want in ((total, c.sum(1)), (high, c.amax(1)), (low, c.amin(1)), (product, c.prod(1))):
        assert torch.equal(got.cpu(), want)


def test_floats_with_nan_keepdim_and_logical_parts(device):
    x = torch.randn(6, 50, device=device)
    x[2, 7] = float("nan")
    assert_matches_torch(tc.fanout(tc.sum(axis=-1, keepdim=True), tc.max(axis=-1, keepdim=True),
                                   tc.reduce(tc.logaddexp, axis=-1, keepdim=True)), x)
    flags = torch.rand(3, 11, device=device) > 0.5
    some, every = tc.fanout(tc.any(axis=0), tc.all(axis=0))(flags)
    assert torch.equal(some.cpu(), flags.cpu().any(0)) and torch.equal(every.cpu(), flags.cpu().all(0))


def test_fanout_errors_name_the_argument():
    with pytest.raises(tc.TricombError, match="argument 1 reduces axis=\\(0,\\)"):
        tc.fanout(tc.sum(axis=1), tc.max(axis=0))
    with pytest.raises(tc.TricombError, match="argument 0 \\(mean\\(axis=1\\)\\) is not a reduce stage"):
        tc.fanout(tc.mean(axis=1), tc.max(axis=1))
    with pytest.raises(tc.TricombError, match="two or more"):
        tc.fanout(tc.sum())


def test_a_fanout_prints_as_text_that_parses_back(device):
    """The map copying the input and the reduce of builtins per field print as lambdas; parsed back, the reduce
    keeps torch's meaning per field (a sum of int32 is int64)."""
    pipe = tc.fanout(tc.sum(axis=1), tc.max(axis=1), tc.any(axis=1))
    again = tc.parse(str(pipe))
    assert again.ir == pipe.ir
    x = torch.randint(-5, 5, (3, 7), dtype=torch.int32, device=device)
    total, high, some = again(x)
    assert total.dtype == torch.int64 and torch.equal(total.cpu(), x.cpu().sum(1))
    assert torch.equal(high.cpu(), x.cpu().amax(1)) and torch.equal(some.cpu(), x.cpu().any(1))
