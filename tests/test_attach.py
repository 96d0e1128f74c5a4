"""attach: a reduction's result used again on every element of its row, in one kernel (softmax, norms).

Grouped by what they check: the meaning (against torch's own functions and the oracle), both plans (the row
held in one tile, and swept in tiles), one launch, the text form, the plan's account, and the errors."""
import math

import pytest
import torch
import torch.nn.functional as F

import tricomb as tc
from hypothesis import given, note
from hypothesis import strategies as st
from tricomb.testing import assert_matches_torch, schedule_overrides
from tricomb.pipeline.evaluate import evaluate
from tricomb.testing.strategies import laid_out, shapes, tensors

from conftest import DEVICES, one_launch

inf, nan = math.inf, math.nan
L = tc.library

# the row in one tile (the schedule's choice for these sizes), and swept in tiles of 4 elements, 2 rows a tile
PLANS = [{}, {"BLOCK_K": 4, "BLOCK_M": 2}]
PLAN_IDS = ["whole-row", "sweeps"]

TWO_PASS = (tc.attach(tc.max(axis=-1)) >> tc.map(lambda v, m: tc.exp(v - m)) >> tc.attach(tc.sum(axis=-1))
            >> tc.map(lambda e, s: e / s))
ONLINE = tc.attach(L.softmax_denominators(axis=-1)) >> tc.map(lambda v, m, s: tc.exp(v - m) / s)
RMS = tc.attach(tc.map(tc.square) >> tc.mean(axis=-1)) >> tc.zip_with(lambda v, ms, w: v * tc.rsqrt(ms + 1e-6) * w)

SHAPES = [(4, 7), (3, 1), (1, 1), (5, 300), (2, 3, 9), (7,), (0, 5), (5, 0), ()]


def _special(shape) -> torch.Tensor:
    """Random values with NaN, +inf and -inf placed in some rows."""
    x = torch.randn(shape)
    flat = x.view(-1)
    for k, v in zip(range(0, flat.numel(), 11), (nan, inf, -inf)):
        flat[k] = v
    return x


@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_softmax_forms_are_torch_softmax(shape, plan, device):
    """The two-pass softmax a user writes and the online one give torch.softmax, NaN and infinities included
    (a row with NaN or +inf is NaN, as torch's)."""
    x = _special(shape).to(device)
    want = torch.softmax(x.cpu().double(), -1)
    with schedule_overrides(**plan):
        for pipe in (TWO_PASS, ONLINE, L.softmax()):
            got = one_launch(pipe, x) if x.numel() else pipe(x)
            assert got.dtype == x.dtype and got.shape == x.shape
            torch.testing.assert_close(got.cpu().double(), want, rtol=1e-5, atol=1e-6, equal_nan=True)
            assert_matches_torch(pipe, x)


@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_library_functions_are_torch_functions(dtype, plan, device):
    """softmax, log_softmax, layer_norm and rms_norm as torch's functions, in value, dtype and shape (half types
    computed in float32, as torch computes them)."""
    x = (torch.randn(6, 37) * 3 + 1).to(dtype).to(device)
    w, b = (torch.randn(37).to(dtype).to(device) for _ in range(2))
    tol = {torch.float16: 2e-3, torch.float32: 2e-5, torch.float64: 1e-10}[dtype]
    up = (lambda t: t.double()) if dtype == torch.float64 else (lambda t: t.float())
    cases = [(L.softmax(), (x,), torch.softmax(up(x), -1)),
             (L.log_softmax(), (x,), torch.log_softmax(up(x), -1)),
             (L.layer_norm(), (x, w, b), F.layer_norm(up(x), (37,), up(w), up(b))),
             (L.layer_norm(eps=0.1, weight=False, bias=False), (x,), F.layer_norm(up(x), (37,), eps=0.1)),
             (L.layer_norm(bias=False), (x, w), F.layer_norm(up(x), (37,), up(w))),
             (L.rms_norm(), (x, w), F.rms_norm(up(x), (37,), up(w), 1e-6)),
             (L.rms_norm(eps=1e-3, weight=False), (x,), F.rms_norm(up(x), (37,), eps=1e-3)),
             (RMS, (x, w), F.rms_norm(up(x), (37,), up(w), 1e-6))]
    with schedule_overrides(**plan):
        for pipe, inputs, want in cases:
            got = one_launch(pipe, *inputs)
            assert got.dtype == dtype and got.shape == want.shape, (str(pipe), got.dtype)
            torch.testing.assert_close(got.cpu(), want.to(dtype).cpu(), rtol=tol, atol=tol)


def _targets(n: int, classes: int, device) -> torch.Tensor:
    """Class targets, one ignored (torch's -100) where there are two rows or more."""
    t = torch.randint(0, max(classes, 1), (n,))
    if n >= 2:
        t[1] = -100
    return t.to(device)


@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("smoothing", [0.0, 0.25])
@pytest.mark.parametrize("shape", [(6, 37), (3, 1), (1, 300), (0, 5), (2, 5, 3), (300, 3)], ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_is_torch_cross_entropy(reduction, shape, smoothing, dtype, plan, device):
    """Per row, with ignored targets, label smoothing, the class axis 1 of (N, C, d) logits, NaN, infinities
    and a row of only -inf, in one launch: F.cross_entropy in value, dtype and shape, each reduction (a mean over
    300 rows counts more rows than bfloat16 holds exactly)."""
    x = (torch.randn(shape) * 3).to(dtype)
    if shape[0] >= 3 and shape[1] >= 2:
        x[0, 0], x[2] = math.inf, -math.inf
    x = x.to(device)
    t = _targets(shape[0], shape[1], device)
    if len(shape) == 3:
        t = t[:, None].expand(shape[0], shape[2]).contiguous()
    if reduction != "none" and shape[0] >= 3 and shape[1] >= 2:
        x[2] = 0.0  # (a row of -inf makes a mean or sum NaN, which the per-row losses check)
    pipe = L.cross_entropy(reduction=reduction, label_smoothing=smoothing)
    want = F.cross_entropy(x.cpu().double(), t.cpu(), reduction=reduction, label_smoothing=smoothing)
    with schedule_overrides(**plan):
        got = one_launch(pipe, x, t[:, None]) if x.numel() else pipe(x, t[:, None])
    tol = {torch.bfloat16: 2e-2, torch.float32: 2e-5, torch.float64: 1e-10}[dtype]
    assert got.dtype == dtype and got.shape == want.shape, (got.dtype, got.shape)
    torch.testing.assert_close(got.cpu().double(), want, rtol=tol, atol=tol, equal_nan=True)


ONE_HOT = [
    "attach logsumexp(axis=-1) | zip_with (v, lse, t) -> where(index(-1) == t, lse - v, 0) | sum(axis=-1)",
    "attach max(axis=-1) | zip_with (v, m, t) -> where(t == index(-1), exp(v - m), 0.0) | sum(axis=-1)",
    "attach sum(axis=-1) | map (v, s) -> where(index(-1) == index(-2), v / s, 0) | sum(axis=-1)",
]
NOT_ONE_HOT = [
    "attach max(axis=-1) | zip_with (v, m, t) -> where(index(-1) == t, v - m, 1) | sum(axis=-1)",
    "attach max(axis=-1) | map (v, m) -> where(index(-1) == v, v - m, 0) | sum(axis=-1)",
    "attach max(axis=-1) | zip_with (v, m, t) -> where(index(-1) == t, v - m, 0) | max(axis=-1)",
    "attach max(axis=-1) | map (v, m) -> (v - m, m) | zip_with (d, m, t) -> where(index(-1) == t, d, 0) | sum(axis=-1)",
]


@pytest.mark.parametrize("text", ONE_HOT + NOT_ONE_HOT)
def test_a_sum_of_one_position_a_row_reads_that_element_alone(text, device):
    """A reduce after attaches that sums terms 0 but at one position a row, the position known per row (a target,
    the diagonal), reads that element after the attached folds instead of sweeping again (one loop, not two); a
    term not 0 elsewhere, a position read from the element, another operator, or a stream remade between the
    attach and the term sweep again. Either way: torch's values, targets out of the row included."""
    x = (torch.rand(6, 40) + 0.5).to(device)  # (row sums far from 0: v / s is well-conditioned at 1e-5)
    t = torch.tensor([[3], [39], [0], [40], [-1], [17]]).to(device)
    pipe = tc.parse(text)
    inputs = (x, t) if "zip_with" in text else (x,)
    with schedule_overrides(BLOCK_K=8, BLOCK_M=2):
        source = pipe.source(*inputs)
        assert ("read that element alone" in source) == (text in ONE_HOT)
        assert source.count("for k0 in range(") == (1 if text in ONE_HOT else 2)
        assert_matches_torch(pipe, *inputs)
        want = evaluate(pipe.ir, [i.cpu() for i in inputs])  # a sum of zeros is exactly 0, at any tolerance
        torch.testing.assert_close(pipe(*inputs).cpu(), want, rtol=1e-5, atol=1e-5)


def test_cross_entropy_reads_a_long_row_once():
    x, t = torch.randn(4, 300), torch.randint(0, 300, (4, 1))
    with schedule_overrides(BLOCK_K=64):
        source = L.cross_entropy(reduction="none").source(x, t)
    assert "read that element alone" in source and source.count("for k0 in range(") == 1


def test_cross_entropy_takes_torch_targets_of_any_integer_dtype(device):
    """uint8 targets: class 156 is not the default ignore_index -100 (which wraps to 156 in uint8), nor class 44
    an ignore_index of 300; and an int64 target is ignore_index only when equal to it, not within float32's
    rounding of it."""
    x = torch.randn(2, 160).to(device)
    t = torch.tensor([156, 44], dtype=torch.uint8).to(device)
    for ignore in (-100, 300):
        want = F.cross_entropy(x.cpu(), t.cpu().long(), reduction="none", ignore_index=ignore)
        torch.testing.assert_close(L.cross_entropy(reduction="none", ignore_index=ignore)(x, t[:, None]).cpu(), want)
    big = torch.tensor([[2 ** 24], [1]]).to(device)  # 2**24 and 2**24 + 1 are one float32: not ignored, out of range
    got = L.cross_entropy(reduction="none", ignore_index=2 ** 24 + 1)(x, big).cpu()
    assert got[0].isnan() and not got[1].isnan()


def test_cross_entropy_refuses_targets_without_the_class_axis(device):
    """torch's (N,) targets, and (N, d) ones of (N, C, d) logits: the class axis must be kept at size 1, else
    they would broadcast along it (silently, where N == C)."""
    pipe = L.cross_entropy(reduction="none")
    for x, t in [(torch.randn(4, 4), torch.tensor([0, 2, 1, 3])), (torch.randn(2, 5, 3), torch.zeros(2, 3).long())]:
        with pytest.raises(tc.ShapeError, match=r"must have size 1 along axis 1 .* target\[:, None\]"):
            pipe(x.to(device), t.to(device))


def test_cross_entropy_of_a_target_out_of_range_is_nan(device):
    """torch raises for a target outside [0, C) that is not ignore_index; a kernel cannot, so its row is NaN,
    never a silent number."""
    x, t = torch.randn(4, 6).to(device), torch.tensor([[0], [6], [-1], [-100]]).to(device)
    got = L.cross_entropy(reduction="none")(x, t)
    assert got[1].isnan() and got[2].isnan() and got[3] == 0 and not got[0].isnan()
    assert L.cross_entropy(reduction="none", ignore_index=-1)(x, t)[2] == 0


@pytest.mark.parametrize("build, match", [
    (lambda: L.cross_entropy(reduction="avg"), "one of 'none', 'mean', 'sum'"),
    (lambda: L.cross_entropy(reduction="none", label_smoothing=1.5), r"in \[0, 1\]"),
    (lambda: L.cross_entropy(reduction="none", ignore_index=0.5), "ignore_index must be an int"),
    (lambda: L.cross_entropy(reduction="none", axis=None), "axis must be an int"),
    (lambda: L.cross_entropy(reduction="none", weight=True), "takes ignore_index"),
])
def test_what_cross_entropy_refuses(build, match):
    with pytest.raises(tc.TricombError, match=match):
        build()


def _attach_pipelines(axis):
    """The attach pipelines the property test draws from, over ``axis``: softmax written both ways, log_softmax,
    a norm with a weight, a reduce after an attach, a centred mean of magnitudes."""
    return [
        tc.attach(tc.max(axis=axis)) >> tc.map(lambda v, m: tc.exp(v - m)) >> tc.attach(tc.sum(axis=axis))
        >> tc.map(lambda e, s: e / s),
        tc.attach(L.softmax_denominators(axis=axis)) >> tc.map(lambda v, m, s: tc.exp(v - m) / s),
        L.log_softmax(axis=axis),
        tc.attach(tc.map(tc.square) >> tc.mean(axis=axis)) >> tc.map(lambda v, ms: v * tc.rsqrt(ms + 1e-3)),
        tc.attach(tc.max(axis=axis)) >> tc.map(lambda v, m: tc.exp(v - m)) >> tc.sum(axis=axis),
        tc.map(tc.abs) >> tc.attach(tc.mean(axis=axis)) >> tc.map(lambda v, m: v - m),
    ]


@st.composite
def attach_cases(draw):
    shape = draw(shapes(max_rank=3, max_side=19, allow_empty=True))
    rank = len(shape)
    axis = draw(st.sampled_from([None] + list(range(-rank, rank)) + ([(0, rank - 1)] if rank >= 2 else [])))
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.float16]))
    x = draw(laid_out(draw(tensors(shape, dtype))))
    pipe = draw(st.sampled_from(_attach_pipelines(axis)))
    plan = draw(st.sampled_from(PLANS))
    return pipe, x, plan


@st.composite
def cross_entropy_cases(draw):
    """Logits (N, C) or (N, C, d) with NaN and infinities in any layout, targets in range, ignored or out of it,
    label smoothing or none, both plans."""
    n, c = draw(st.integers(0, 9)), draw(st.integers(1, 19))
    shape = (n, c) + ((draw(st.integers(1, 3)),) if draw(st.booleans()) else ())
    x = draw(laid_out(draw(tensors(shape, draw(st.sampled_from([torch.float32, torch.float64]))))))
    ignore = draw(st.sampled_from([-100, 0, c - 1]))
    t = draw(st.lists(st.sampled_from([ignore, -1, c] + list(range(c))), min_size=math.prod(shape) // c,
                      max_size=math.prod(shape) // c))
    t = torch.tensor(t, dtype=torch.int64).reshape((n,) + shape[2:])
    smoothing = draw(st.sampled_from([0.0, 0.3]))
    return x, t, ignore, smoothing, draw(st.sampled_from(PLANS))


@given(cross_entropy_cases(), st.sampled_from(["none", "mean", "sum"]))
def test_random_cross_entropy_is_torch_cross_entropy(case, reduction):
    """torch's F.cross_entropy in float64, a target outside [0, C) that is not ignored being NaN here, and so
    its mean and sum (torch raises for it)."""
    x, t, ignore, smoothing, plan = case
    note(f"{tuple(x.shape)} {x.dtype} strides {x.stride()}, targets {t.tolist()}, ignore {ignore}, "
         f"smoothing {smoothing}, plan {plan}, reduction {reduction}")
    c = x.shape[1]
    bad = (t != ignore) & ((t < 0) | (t >= c))
    want = F.cross_entropy(x.double(), torch.where(bad, ignore, t), reduction=reduction, ignore_index=ignore,
                           label_smoothing=smoothing)
    want = torch.where(bad, math.nan, want) if reduction == "none" else torch.where(bad.any(), math.nan, want)
    pipe = L.cross_entropy(reduction=reduction, ignore_index=ignore, label_smoothing=smoothing)
    for device in DEVICES:
        with schedule_overrides(**plan):
            got = pipe(x.to(device), t.unsqueeze(1).to(device))
        torch.testing.assert_close(got.cpu().double(), want, rtol=1e-5, atol=1e-5, equal_nan=True)


@given(attach_cases())
def test_random_attach_pipelines_match_torch(case):
    """Shapes of rank 0 to 3 (length-1, non-power-of-2 and empty sides), any axis or axes, float dtypes, NaN
    and infinities, every layout, both plans: the kernel equals the pipeline's torch meaning."""
    pipe, x, plan = case
    note(f"{pipe} on {tuple(x.shape)} {x.dtype} strides {x.stride()}, plan {plan}")
    for device in DEVICES:
        try:
            from tricomb.pipeline.evaluate import evaluate
            evaluate(pipe.ir, [x])
        except RuntimeError:  # torch refuses (a max over an empty axis): so must tricomb
            with pytest.raises(tc.TricombError):
                pipe(x.to(device))
            continue
        with schedule_overrides(**plan):
            assert_matches_torch(pipe, x.to(device))


@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
def test_softmax_of_special_rows_is_torch(plan, device):
    """Rows of only -inf, holding +inf, holding NaN, one element, and a finite row, each as torch.softmax and
    torch.log_softmax."""
    x = torch.tensor([[-inf, -inf, -inf], [inf, 1.0, 2.0], [nan, 1.0, 2.0], [inf, inf, -inf], [1.0, 2.0, 3.0],
                      [-inf, 0.0, -inf]], device=device)
    with schedule_overrides(**plan):
        for pipe, ref in ((L.softmax(), torch.softmax), (L.log_softmax(), torch.log_softmax), (TWO_PASS, torch.softmax)):
            torch.testing.assert_close(pipe(x).cpu(), ref(x.cpu(), -1), equal_nan=True)


@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
@pytest.mark.parametrize("axis", [0, 1, (0, 2), None])
def test_attach_along_any_axes_and_layouts(axis, plan, device):
    """Axes other than the last, several axes, all of them; transposed, sliced and expanded inputs; an input
    joining after the attach broadcast to the stream's shape. (Positive values: a sum that cancels would make
    its quotient ill-conditioned beyond what the oracle's error scale bounds.)"""
    base = torch.rand(5, 6, 7, device=device) + 0.5
    layouts = [base, base.transpose(0, 2).contiguous().transpose(0, 2), base[:, ::2], base[:1].expand(5, 6, 7)]
    pipe = tc.attach(tc.sum(axis=axis)) >> tc.zip_with(lambda v, s, y: v / s + y)
    with schedule_overrides(**plan):
        for x in layouts:
            y = torch.randn(x.shape[-1], device=device)
            assert_matches_torch(pipe, x, y)
            dims = axis if axis is not None else tuple(range(3))
            torch.testing.assert_close(pipe(x, y), x / x.sum(dims, keepdim=True) + y, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
def test_attached_folds_of_every_kind(plan, device):
    """An attach's reduce may be a tuple operator, argmax, a mean, an operator that does not commute, one
    without an identity; a reduce may follow the attaches; maps may run before the first."""
    x = torch.randn(6, 11, device=device)
    first = tc.attach(tc.reduce(lambda a, b: a, axis=-1)) >> tc.map(lambda v, f: v - f)
    pipes = [
        (tc.attach(tc.argmax(axis=-1)) >> tc.map(lambda v, i: i), x.argmax(-1, keepdim=True).expand(6, 11)),
        (tc.map(tc.abs) >> tc.attach(tc.mean(axis=-1)) >> tc.map(lambda v, m: v - m),
         x.abs() - x.abs().mean(-1, keepdim=True)),
        (first, x - x[:, :1]),
        (tc.map(lambda v: (v, v + 1)) >> tc.attach(tc.zip_with(tc.mul) >> tc.sum(axis=-1))
         >> tc.map(lambda a, b, s: s), (x * (x + 1)).sum(-1, keepdim=True).expand(6, 11)),
        (tc.attach(tc.max(axis=-1)) >> tc.map(lambda v, m: tc.exp(v - m)) >> tc.sum(axis=-1),
         torch.exp(x - x.amax(-1, keepdim=True)).sum(-1)),
        (tc.attach(tc.max(axis=-1)) >> tc.attach(tc.map(lambda v, hi: v) >> tc.min(axis=-1))
         >> tc.map(lambda v, hi, lo: (v - lo) / (hi - lo)),
         (x - x.amin(-1, keepdim=True)) / (x.amax(-1, keepdim=True) - x.amin(-1, keepdim=True))),
    ]
    with schedule_overrides(**plan):
        for pipe, want in pipes:
            assert_matches_torch(pipe, x)
            torch.testing.assert_close(one_launch(pipe, x).to(want.dtype), want, rtol=1e-5, atol=1e-5)


def test_an_attach_to_nothing_takes_no_reduction(device):
    """Rows of no elements: an attach has no element to join a result to, so the reduction is not taken (a max of
    nothing, which torch refuses, is never asked for); a reduce after it gives its identity per row."""
    x = torch.randn(5, 0, device=device)
    assert TWO_PASS(x).shape == (5, 0)
    after = tc.attach(tc.max(axis=-1)) >> tc.map(lambda v, m: tc.exp(v - m)) >> tc.sum(axis=-1)
    assert_matches_torch(after, x)
    assert torch.equal(after(x).cpu(), torch.zeros(5))


@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
def test_two_pass_chains_take_the_one_pass_form_on_long_rows(plan, device):
    """A maximum attached, a map giving exp(v - m) (alone or among other fields), its sum attached: a row swept in
    tiles takes the online normalizer's one-pass form, with the two-pass form's values, special ones included;
    chains that only look alike keep their own form."""
    x = _special((5, 45)).to(device)
    two_field = (tc.attach(tc.max(axis=-1)) >> tc.map(lambda v, m: (v - m, tc.exp(v - m)))
                 >> tc.attach(tc.map(lambda d, e: e) >> tc.mean(axis=-1)) >> tc.map(lambda d, e, s: d - tc.log(s)))
    alike = (tc.attach(tc.max(axis=-1)) >> tc.map(lambda v, m: tc.exp(m - v)) >> tc.attach(tc.sum(axis=-1))
             >> tc.map(lambda e, s: e / s))
    with schedule_overrides(**plan):
        for pipe, derived in ((TWO_PASS, True), (two_field, True), (L.log_softmax(), True), (alike, False)):
            assert (pipe.explain(x).kernel_plan.long_rows is not None) == derived, str(pipe)
            assert_matches_torch(pipe, x)
    ints = torch.randint(-5, 5, (3, 40), device=device)
    assert TWO_PASS.explain(ints).kernel_plan.long_rows is None  # an integer maximum: the two passes stay
    assert_matches_torch(TWO_PASS, ints)


def test_long_rows_are_swept(device):
    """A row longer than the largest tile is swept (the schedule's own choice, not an override): 70000
    elements."""
    x = torch.randn(2, 70000, device=device)
    torch.testing.assert_close(one_launch(TWO_PASS, x), torch.softmax(x, -1), rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(one_launch(L.softmax(), x), torch.softmax(x, -1), rtol=1e-5, atol=1e-8)


def test_the_text_form_round_trips():
    texts = ["attach max(axis=-1) | map (v, m) -> exp(v - m) | attach sum(axis=-1) | map (e, s) -> e / s",
             "attach softmax_denominators(axis=-1) | map (v, m, s) -> exp(v - m) / s",
             "attach (map square | mean(axis=-1)) | zip_with (v, ms, w) -> v * rsqrt(ms + 1e-6) * w",
             "map abs | attach sum(axis=0, keepdim=True) | map (v, s) -> v / s | sum"]
    for text in texts:
        pipe = tc.parse(text)
        assert tc.parse(str(pipe)) == pipe
    for pipe in (TWO_PASS, ONLINE, RMS, L.softmax(), L.log_softmax(), L.layer_norm(), L.rms_norm()):
        assert tc.parse(str(pipe)) == pipe
    assert tc.parse("softmax(axis=0)") == L.softmax(axis=0)
    assert tc.parse("layer_norm(eps=0.001, bias=False)") == L.layer_norm(eps=0.001, bias=False)


# programs sharing each row tile: 3 ways (a part held in one tile), 7 ways in tiles of 64 (parts swept), 16 ways
SHARED_PLANS = [{"SPLIT": 3}, {"SPLIT": 7, "BLOCK_K": 64}, {"SPLIT": 16, "BLOCK_K": 1024}]
CUDA_ONLY = pytest.mark.skipif(not torch.cuda.is_available(), reason="programs sharing a row wait for each other, "
                               "which Triton's interpreter (one program at a time) cannot run")


@CUDA_ONLY
@pytest.mark.parametrize("plan", SHARED_PLANS, ids=str)
@pytest.mark.parametrize("shape", [(1, 5000), (3, 4099), (2, 3, 1000), (5, 100), (2, 1)], ids=str)
def test_rows_shared_by_programs_are_torch(shape, plan):
    """Softmax both ways, layer_norm and a row's share of its sum, with each row tile shared by programs that
    exchange their parts' partials: torch's, NaN and infinities included, with parts past the row's end (100
    elements 16 ways), in one launch."""
    x = _special(shape).cuda()
    w, b = torch.randn(shape[-1]).cuda(), torch.randn(shape[-1]).cuda()
    cases = [(TWO_PASS, (x,), torch.softmax(x.double(), -1)), (ONLINE, (x,), torch.softmax(x.double(), -1)),
             (L.layer_norm(), (x, w, b), F.layer_norm(x.double(), shape[-1:], w.double(), b.double())),
             (tc.attach(tc.sum(axis=-1)) >> tc.map(lambda v, s: v / s), (x,), x.double() / x.double().sum(-1, True))]
    for pipe, inputs, want in cases:
        with schedule_overrides(**plan):
            got = one_launch(pipe, *inputs)
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5, equal_nan=True)


@CUDA_ONLY
def test_a_whole_array_is_shared_by_the_programs():
    """``x / sum(x)`` over a whole array: the schedule shares the one row over the SMs (explain says so), and the
    result is torch's, run after run."""
    x = torch.rand(3_000_000, device="cuda")
    pipe = tc.attach(tc.sum()) >> tc.map(lambda v, s: v / s)
    assert "shared by" in str(pipe.explain(x))
    for _ in range(3):
        torch.testing.assert_close(pipe(x), x / x.sum(), rtol=1e-4, atol=1e-9)


def test_the_interpreter_never_shares_a_row():
    """Triton's interpreter runs programs one after another, so a program could never see a later one's partial:
    a forced SPLIT is not taken there."""
    x = torch.randn(2, 300)
    with schedule_overrides(SPLIT=4, BLOCK_K=64):
        torch.testing.assert_close(one_launch(L.softmax(), x), torch.softmax(x, -1))


def test_explain_names_the_plan():
    text = str(TWO_PASS.explain(torch.randn(4, 8)))
    assert text.startswith("1 kernel: attach")
    assert "read once and held on chip" in text and "swept once per attached fold" in text
    assert "attach: max(axis=-1)" in text and "attach: sum(axis=-1)" in text
    assert text.endswith("chosen for these inputs: 4 rows of 8 elements, tiles of 4 x 8: each row read once, held "
                         "on chip")
    long = str(TWO_PASS.explain(torch.randn(2, 70000)))
    assert "a longer row takes the one-pass form" in long
    assert long.endswith("2 rows of 70000 elements, tiles of 1 x 65536: each row swept 2 times")
    ce = str(L.cross_entropy(reduction="none").explain(torch.randn(2, 70000), torch.zeros(2, 1, dtype=torch.int64)))
    assert "read at that position alone" in ce
    assert ce.endswith("2 rows of 70000 elements, tiles of 1 x 65536: each row swept 1 time, then read at its one "
                       "position")


@pytest.mark.parametrize("build, match", [
    (lambda: L.rms_norm(axis=0), r"rms_norm's axis must be -1 or a tuple of the trailing axes"),
    (lambda: L.layer_norm(axis=(-1, -3)), r"layer_norm's axis must be -1 or a tuple of the trailing axes"),
    (lambda: L.layer_norm(normalized_shape=(6,)), r"torch's normalized_shape is axis here"),
])
def test_norms_refuse_what_torch_means_otherwise(build, match):
    """A norm's weight broadcasts along the trailing axes, so only those are normalized (torch's
    normalized_shape); torch's argument names get pointed errors."""
    with pytest.raises(tc.ArgumentError, match=match):
        build()


def test_the_result_is_laid_out_as_torch_softmax(device):
    x = torch.randn(6, 4, device=device).t()
    for pipe in (L.softmax(), L.layer_norm(weight=False, bias=False), TWO_PASS):
        assert pipe(x).stride() == torch.softmax(x, -1).stride() == (6, 1)


@pytest.mark.parametrize("build, match", [
    (lambda: tc.attach(tc.map(tc.exp)), r"ends in a reduce .* but this one holds none; in text, put a pipeline"),
    (lambda: tc.attach(L.softmax()), r"holds one .* attach a reduction \(for softmax.s: softmax_denominators"),
    (lambda: tc.attach(tc.cumsum() >> tc.sum()), r"holds a scan"),
    (lambda: tc.attach(tc.zip_with(tc.mul) >> tc.sum(axis=-1))(torch.ones(2, 3)),
     r"as the first stage it gets one input, and an attached pipeline brings in no input of its own"),
    (lambda: tc.map(lambda x: (x, x)) >> tc.attach(tc.zip_with(lambda a, b, c: a * b * c) >> tc.sum()),
     r"takes 3 arguments but the stream has 2 field\(s\): an attached pipeline brings in no input of its own"),
    (lambda: tc.map(lambda x: (x, x)) >> tc.attach(tc.map(tc.exp) >> tc.sum()),
     r"map 'exp' takes 1 arguments but the stream has 2 field\(s\)"),
    (lambda: tc.attach(tc.sum(axis=-1)) >> tc.map(lambda v, s: v / s) >> tc.cumsum(), r"scan after an attach"),
    (lambda: tc.sum(axis=-1) >> tc.attach(tc.max()), r"attach after a reduce or scan"),
    (lambda: tc.attach(tc.exp), r"takes a pipeline"),
])
def test_what_attach_refuses(build, match):
    with pytest.raises(tc.TricombError, match=match):
        build()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device with about 3 GB free")
def test_offsets_past_two_to_the_31_along_the_row():
    """A row whose elements lie 2**30 bytes apart: its offsets pass int32 in both plans."""
    step = 1 << 30
    base = torch.zeros(2 * step + 8, dtype=torch.uint8, device="cuda")
    base[step + 2] = 7
    x = base.as_strided((3, 4), (step, 1))
    pipe = tc.attach(tc.max(axis=0)) >> tc.map(lambda v, m: m)
    for plan in PLANS:
        with schedule_overrides(**plan):
            assert torch.equal(pipe(x).cpu(), x.amax(0, keepdim=True).expand(3, 4).cpu())


def test_streams_that_do_not_span_the_inputs_are_refused():
    """A field computed from only a later input keeps that input's shape in torch's meaning: after an attach it
    cannot be a result of the stream's shape, and a fold over the broadcast would count it more than once."""
    x, y = torch.rand(4, 6) + 1, torch.ones(6)
    only_y = tc.attach(tc.sum(axis=-1)) >> tc.zip_with(lambda v, s, y: y * 2)
    with pytest.raises(tc.UnsupportedError, match=r"result field 0 has shape \(6,\), not the stream's \(4, 6\)"):
        only_y(x, y)
    for pipe in (tc.attach(tc.sum()) >> tc.zip_with(lambda v, s, y: y) >> tc.sum(), tc.zip_with(lambda x, y: y) >> tc.sum()):
        with pytest.raises(tc.UnsupportedError, match=r"stream entering this reduce has shape \(6,\), smaller than"):
            pipe(x, y)
    spans = tc.zip_with(lambda x, y: (x, y)) >> tc.attach(tc.zip_with(tc.mul) >> tc.sum(axis=-1))
    assert_matches_torch(spans, torch.randn(4, 1), torch.randn(1, 6))


def test_inputs_and_axes_that_do_not_fit_are_refused_before_launch():
    x = torch.randn(4, 1)
    grows = tc.attach(tc.sum(axis=-1)) >> tc.zip_with(lambda v, s, y: v / s + y)
    with pytest.raises(tc.ShapeError, match=r"joins after an attach and would grow the stream's shape \(4, 1\)"):
        grows(x, torch.randn(5))
    mixed = tc.attach(tc.sum(axis=-1)) >> tc.attach(tc.map(lambda v, s: v) >> tc.max(axis=0)) >> tc.map(lambda v, s, m: v)
    with pytest.raises(tc.UnsupportedError, match=r"folds axes \[0\] but the attach before it folds \[1\]"):
        mixed(torch.randn(3, 4))
    with pytest.raises(tc.ArgumentError, match=r"layer_norm's eps must be a number >= 0"):
        L.layer_norm(eps=-1.0)
    with pytest.raises(tc.ArgumentError, match=r"rms_norm's weight must be True or False"):
        L.rms_norm(weight=None)
