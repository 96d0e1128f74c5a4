"""The reduce over the rows: a reduce after the per-row one, over all the axes it leaves, in the same kernel
(cross-entropy's mean and sum over the batch).

Grouped by what they check: the meaning (against the oracle and torch) for both plans and many programs, one
launch, the same result run after run, the text form, the plan's account, and what is refused."""
import pytest
import torch

import tricomb as tc
from hypothesis import given, note
from hypothesis import strategies as st
from tricomb.testing import assert_matches_torch, schedule_overrides
from tricomb.testing.strategies import laid_out, shapes, tensors

from conftest import DEVICES, one_launch

PLANS = [{}, {"BLOCK_K": 4, "BLOCK_M": 2}]
PLAN_IDS = ["whole-row", "sweeps"]

SOFTMAX_TERMS = tc.attach(tc.max(axis=-1)) >> tc.map(lambda v, m: tc.exp(v - m)) >> tc.sum(axis=-1)
PIPELINES = {
    "sum of row sums": tc.sum(axis=-1) >> tc.sum(),
    "sum of row maxima, keepdim": tc.max(axis=-1) >> tc.sum(keepdim=True),
    "max of row sums": tc.sum(axis=-1, keepdim=True) >> tc.max(),
    "logsumexp rows, summed, then scaled": SOFTMAX_TERMS >> tc.map(tc.log) >> tc.sum() >> tc.map(lambda s: s * 2),
    "pairs": tc.map(lambda v: (v, v * v)) >> tc.reduce(lambda a, b, c, d: (a + c, b + d), axis=-1,
                                                       identity=(0.0, 0.0))
             >> tc.reduce(lambda a, b, c, d: (a + c, b + d), identity=(0.0, 0.0)) >> tc.map(lambda s, q: q - s),
    "over the first axis": tc.sum(axis=0) >> tc.map(tc.abs) >> tc.sum(),
}


@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
@pytest.mark.parametrize("shape", [(5, 7), (3, 1), (1, 1), (0, 4), (4, 0), (2, 3, 9), (1100, 3)], ids=str)
@pytest.mark.parametrize("name", PIPELINES)
def test_a_reduce_over_the_rows_is_the_oracle(name, shape, plan, device):
    """Each pipeline equals the torch oracle in value, dtype and shape, in one launch: rows held in one tile and
    swept, no rows (the identity's result), empty rows, and 1100 rows in 2-row programs (550 partials, more than
    the last program folds in one step). A maximum over no element is refused, as torch refuses it."""
    pipe = PIPELINES[name]
    x = torch.randn(shape).to(device)
    with schedule_overrides(**plan):
        _matches_torch(pipe, x, lambda: one_launch(pipe, x))


def _matches_torch(pipe, x, run) -> None:
    """``run()`` matches the oracle, or raises torch's refusal of a maximum or minimum over no element."""
    try:
        got = run()
    except tc.StageError as exc:
        assert "reducing over zero-size dimension" in str(exc) and x.numel() == 0
        return
    assert_matches_torch(pipe, x, result=got)


def test_the_result_is_the_same_run_after_run(device):
    """The programs' partials fold in index order, not in the order programs finish: the same bits every run,
    and the ticket is reset for the next launch."""
    x = (torch.randn(4099, 33, generator=torch.Generator().manual_seed(0)) * 1e3).to(device)
    pipe = tc.sum(axis=-1) >> tc.sum()
    with schedule_overrides(BLOCK_M=2):
        first = pipe(x)
        for _ in range(3):
            assert torch.equal(pipe(x), first)
    # a float32 sum's rounding grows with the magnitudes summed (1e8 here, about 1e2 of error at most); a lost or
    # doubled program's partial (two rows, some 1e4) is far outside it
    bound = 1e-6 * float(x.abs().sum())
    assert abs(float(first) - float(x.cpu().double().sum())) <= bound


def test_inputs_may_join_between_the_reduces(device):
    """A per-row input (weights of shape (N,)) joins after the per-row reduce, before the rows are reduced."""
    x, w = torch.randn(6, 5).to(device), torch.randn(6).to(device)
    pipe = tc.sum(axis=-1) >> tc.zip_with(lambda s, w: s * w) >> tc.sum()
    torch.testing.assert_close(one_launch(pipe, x, w), (x.sum(-1) * w).sum())


def test_the_text_form_round_trips():
    pipe = tc.parse("map (v) -> v * v | sum(axis=-1) | sum")
    assert str(tc.parse(str(pipe))) == str(pipe)
    x = torch.randn(3, 4)
    torch.testing.assert_close(pipe(x), (x * x).sum())


def test_explain_names_the_reduce_over_the_rows():
    text = str((tc.sum(axis=-1) >> tc.sum()).explain(torch.randn(3, 4)))
    assert "1 kernel: per-row reduce" in text
    assert "sum over the rows' results" in text and "last ticket" in text


@pytest.mark.parametrize("build, match", [
    (lambda: tc.sum(axis=-1) >> tc.mean(), "takes no mean"),
    (lambda: tc.sum(axis=-1) >> tc.argmax(), "takes no argmax.*Split the pipeline"),
    (lambda: tc.sum(axis=-1) >> tc.reduce(lambda a, b: a - 2 * b + a * b * 0, identity=0.0), "must commute|associative"),
    (lambda: tc.sum(axis=-1) >> tc.sum() >> tc.sum(), "third reduce"),
    (lambda: tc.sum(axis=-1) >> tc.sum() >> tc.zip_with(lambda s, y: s + y), "brings in an input"),
    (lambda: tc.sum(axis=-1) >> tc.sum() >> tc.map(lambda s: s + tc.index(-1)), "no row or coordinate"),
])
def test_what_a_reduce_over_the_rows_refuses(build, match):
    with pytest.raises(tc.TricombError, match=match):
        build()


def test_a_reduce_over_some_of_the_rows_axes_is_refused():
    pipe = tc.sum(axis=-1) >> tc.sum(axis=0)
    with pytest.raises(tc.UnsupportedError, match="over all of its axes"):
        pipe(torch.randn(2, 3, 4))


@st.composite
def rows_cases(draw):
    shape = draw(shapes(max_rank=3, max_side=9, allow_empty=True))
    rank = len(shape)
    axis = draw(st.sampled_from([-1] if rank else [None]))
    x = draw(laid_out(draw(tensors(shape, draw(st.sampled_from([torch.float32, torch.float64]))))))
    first = draw(st.sampled_from([tc.sum(axis=axis), tc.max(axis=axis), tc.attach(tc.max(axis=axis))
                                  >> tc.map(lambda v, m: tc.exp(v - m)) >> tc.sum(axis=axis)]))
    then = draw(st.sampled_from([tc.sum(), tc.max(keepdim=True), tc.min()]))
    return first >> then, x, draw(st.sampled_from(PLANS))


@given(rows_cases())
def test_random_reduces_over_the_rows_match_torch(case):
    pipe, x, plan = case
    note(f"{pipe} on {tuple(x.shape)} {x.dtype} strides {x.stride()}, plan {plan}")
    for device in DEVICES:
        with schedule_overrides(**plan):
            _matches_torch(pipe, x.to(device), lambda: pipe(x.to(device)))
