"""index(axis): the element's coordinate, in every plan kind, before and after each kind of fold.

Grouped by what they check: the meaning against torch in each plan (elementwise, row and whole-array reduces,
scans of every direction, attaches held and swept), layouts and broadcasting, the text form, the position-
dependent kernels it is for (cross-entropy, a causal mask), random pipelines against the oracle, and errors."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note
from hypothesis import strategies as st

import tricomb as tc
from tricomb.testing import assert_matches_torch, schedule_overrides
from tricomb.testing.strategies import laid_out, shapes, tensors

from conftest import DEVICES, one_launch

TILES = [{}, {"BLOCK_K": 4, "BLOCK_M": 2}]  # the schedule's own tiles, and rows in several tiles of 4
TILE_IDS = ["schedule", "small-tiles"]


def along(x: torch.Tensor, axis: int) -> torch.Tensor:
    """torch's coordinate of each element of ``x`` along ``axis``, as int64 of x's shape."""
    axis %= x.dim()
    return torch.arange(x.shape[axis], device=x.device).view([-1 if d == axis else 1 for d in range(x.dim())]) \
        .expand(x.shape)


def _cases(x: torch.Tensor):
    """(pipeline, torch's result) for each plan kind, on a rank-2 ``x``."""
    i0, i1 = along(x, 0), along(x, 1)
    weighted = x * i1
    yield tc.map(lambda v: v + 10 * tc.index(0) + tc.index(-1)), x + 10 * i0 + i1
    yield tc.map(lambda v: v * tc.index(-1)) >> tc.sum(axis=-1), weighted.sum(-1)
    yield tc.sum(axis=-1) >> tc.map(lambda s: s * tc.index(0)), x.sum(-1) * i0[:, 0]
    yield tc.sum(axis=-1, keepdim=True) >> tc.map(lambda s: s + tc.index(-1) + 10 * tc.index(0)), \
        x.sum(-1, keepdim=True) + 10 * i0[:, :1]
    yield tc.map(lambda v: v * tc.index(0)) >> tc.sum(), (x * i0).sum()
    yield tc.map(lambda v: v * tc.index(1)) >> tc.sum(axis=0), weighted.sum(0)
    yield tc.map(lambda v: v * tc.index(-1)) >> tc.cumsum(axis=-1) >> tc.map(lambda c: c + 100 * tc.index(-1)), \
        weighted.cumsum(-1) + 100 * i1
    exclusive_reversed = weighted.flip(-1).cumsum(-1).flip(-1) - weighted
    yield (tc.map(lambda v: v * tc.index(-1)) >> tc.scan(tc.add, axis=-1, exclusive=True, reverse=True)
           >> tc.map(lambda c: c + 100 * tc.index(-1))), exclusive_reversed + 100 * i1
    yield tc.map(lambda v: v * tc.index(-1)) >> tc.cumsum(axis=-1) >> tc.sum(axis=-1), weighted.cumsum(-1).sum(-1)
    yield (tc.attach(tc.map(lambda v: v * tc.index(-1)) >> tc.sum(axis=-1) >> tc.map(lambda s: s + tc.index(0)))
           >> tc.map(lambda v, s: v * s + tc.index(-1))), x * (weighted.sum(-1, keepdim=True) + i0) + i1


@pytest.mark.parametrize("tiles", TILES, ids=TILE_IDS)
def test_index_in_every_plan_kind(tiles, device):
    """Before and after a reduce (kept and removed axes), a whole-array reduce, scans (an exclusive reversed
    one reads and writes different places), a scan then a reduce, and inside and after an attach."""
    x = torch.randn(5, 9, dtype=torch.float64).to(device)
    with schedule_overrides(**tiles):
        for pipe, want in _cases(x):
            got = one_launch(pipe, x)
            assert got.shape == want.shape and got.dtype == want.dtype, pipe
            torch.testing.assert_close(got, want, msg=str(pipe))


def test_index_is_int64_and_promotes_as_torch():
    x = torch.arange(6, dtype=torch.int8).view(2, 3)
    assert tc.map(lambda v: tc.index(-1))(x).dtype == torch.int64
    assert tc.map(lambda v: v + tc.index(-1))(x).dtype == torch.int64
    assert tc.map(lambda v: v * 0.5 + tc.index(-1))(torch.ones(2, 3, dtype=torch.float16)).dtype == torch.float16


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_index_reads_logical_coordinates_of_any_layout(axis, device):
    """A permuted, sliced or expanded input: the coordinate is the logical one, not the memory order's."""
    base = torch.randn(4, 5, 6).to(device)
    for x in (base.permute(2, 0, 1), base[:, ::2, 1:], base[:1].expand(3, 5, 6)):
        want = along(x, axis)
        torch.testing.assert_close(tc.map(lambda v: v * 0 + tc.index(axis))(x), (x * 0 + want))
        torch.testing.assert_close((tc.map(lambda v: v * tc.index(axis)) >> tc.sum(axis=(0, 2)))(x),
                                   (x * want).sum((0, 2)))


def test_a_function_of_lower_rank_indexes_its_own_axes(device):
    """Arguments broadcast right-aligned: index(0) of a (9,) input's map is its own axis, the stream's last."""
    x, y = torch.randn(9).to(device), torch.randn(4, 9).to(device)
    pipe = tc.map(lambda v: v + tc.index(0)) >> tc.zip_with(lambda a, b: a * b + tc.index(0))
    torch.testing.assert_close(pipe(x, y), (x + along(x, 0)) * y + along(y, 0))


def test_a_field_reading_index_has_the_shape_of_all_its_functions_arguments(device):
    """index is a coordinate in the broadcast of every argument: a tuple field of only the smaller input that
    reads it has the larger shape, as torch's meaning does."""
    u, w = torch.randn(3).to(device), torch.randn(2, 3).to(device)
    got, _ = tc.zip_with(lambda u, w: (u + tc.index(-2), u + w))(u, w)
    assert got.shape == (2, 3)
    torch.testing.assert_close(got, u + along(w, 0))


def test_a_field_of_index_alone_folds_like_any_field(device):
    """A field computed from index alone (no element value in it) has the stream's shape in every pass that reads
    its dtype and shape, so reduces of any axes, argmax, attaches and a user's operator on (value, index) pairs
    take it."""
    x = torch.randn(3, 5).to(device)
    i1 = along(x, 1)
    first_max = tc.reduce(lambda a, i, b, j: (tc.where((b > a) | ((b == a) & (j < i)), b, a),
                                              tc.where((b > a) | ((b == a) & (j < i)), j, i)),
                          axis=1, identity=(-math.inf, 2 ** 62))
    cases = [(tc.map(lambda v: tc.where(tc.index(1) > 2, 1.0, 0.0)) >> tc.sum(axis=1), (i1 > 2).double().sum(1)),
             (tc.map(lambda v: tc.index(1) * 1.0) >> tc.max(axis=(0, 1)), i1.double().max()),
             (tc.map(lambda v: tc.index(1) * 1.0) >> tc.argmax(axis=1), i1.argmax(1)),
             (tc.map(lambda v: (v, tc.index(1))) >> first_max, (x.max(1).values, x.argmax(1)))]
    for pipe, want in cases:
        got = pipe(x)
        torch.testing.assert_close(got, want, check_dtype=False, msg=str(pipe))


def test_cross_entropy_and_a_causal_softmax_as_users_write_them(device):
    logits, target = torch.randn(6, 11).to(device), torch.randint(0, 11, (6, 1)).to(device)
    ce = tc.parse("attach logsumexp(axis=-1) | zip_with (v, lse, t) -> where(index(-1) == t, lse - v, 0) "
                  "| sum(axis=-1)")
    torch.testing.assert_close(one_launch(ce, logits, target), F.cross_entropy(logits, target[:, 0], reduction="none"))
    scores = torch.randn(7, 7).to(device)
    causal = tc.map(lambda v: tc.where(tc.index(-1) <= tc.index(-2), v, -math.inf)) >> tc.library.softmax()
    mask = torch.ones(7, 7, dtype=torch.bool, device=device).tril()
    torch.testing.assert_close(one_launch(causal, scores), torch.softmax(scores.masked_fill(~mask, -math.inf), -1))


def test_the_text_form_round_trips():
    for text in ["map v -> v + index(-1) * index(0)", "sum(axis=-1) | map s -> s * index(0)",
                 "attach (map v -> v * index(-1) | sum(axis=-1)) | map (v, s) -> v - s"]:
        pipe = tc.parse(text)
        assert tc.parse(str(pipe)) == pipe


@st.composite
def indexed_cases(draw):
    """A map reading a coordinate, then nothing, a reduce, a scan or an attach along a drawn axis, then a map
    reading a coordinate of what is left."""
    shape = draw(shapes(max_rank=3, max_side=7).filter(len))
    rank = len(shape)
    x = draw(laid_out(draw(tensors(shape, draw(st.sampled_from([torch.float32, torch.float64]))))))
    first = draw(st.integers(-rank, rank - 1))
    axis = draw(st.integers(-rank, rank - 1))
    keepdim = draw(st.booleans())
    fold = draw(st.sampled_from(["none", "sum", "cumsum", "attach"]))
    pipe = tc.map(lambda v: v * 0.5 + tc.index(first))
    if fold == "sum":
        pipe = pipe >> tc.sum(axis=axis, keepdim=keepdim)
    elif fold == "cumsum":
        pipe = pipe >> tc.cumsum(axis=axis)
    elif fold == "attach":
        pipe = pipe >> tc.attach(tc.sum(axis=axis)) >> tc.map(lambda v, s: v - s)
    left = rank - (fold == "sum" and not keepdim)
    if left:
        then = draw(st.integers(-left, left - 1))
        pipe = pipe >> tc.map(lambda v: v + 3 * tc.index(then))
    return pipe, x, draw(st.sampled_from(TILES))


@given(indexed_cases())
def test_random_indexed_pipelines_match_torch(case):
    """Ranks 1 to 3 (length-1 and non-power-of-2 sides), every layout, each fold kind along any axis: the
    kernel equals the pipeline's torch meaning."""
    pipe, x, tiles = case
    note(f"{pipe} on {tuple(x.shape)} strides {x.stride()}, tiles {tiles}")
    with schedule_overrides(**tiles):
        for device in DEVICES:
            assert_matches_torch(pipe, x.to(device))


@pytest.mark.parametrize("build, match", [
    (lambda: tc.index(1.0), "takes one axis, an int"),
    (lambda: tc.index(), "takes one axis"),
    (lambda: tc.map(lambda v: tc.index(v)), "not a value"),
    (lambda: tc.reduce(lambda a, b: a + b * tc.index(0), identity=0), "no coordinate"),
    (lambda: tc.map(lambda v: v + tc.index(2))(torch.ones(3, 4)), r"index\(2\) is out of range .* \[-2, 1\]"),
    (lambda: (tc.sum() >> tc.map(lambda s: s + tc.index(0)))(torch.ones(3)), "a 0-d stream has no axis"),
    (lambda: tc.map(tc.index), "a value of the element"),
    (lambda: tc.sum(axis=-1) >> tc.map(lambda s: s + tc.index(1)), None),
    (lambda: (tc.map(lambda v: v + tc.index(0)) >> tc.zip_with(lambda a, b: a + b))(torch.ones(1, 4),
                                                                                   torch.ones(3, 4)), "size 1"),
])
def test_what_index_refuses(build, match):
    """Each refusal names the problem, before anything launches."""
    if match is None:  # an axis the reduce removed: out of range for the reduced stream
        with pytest.raises(tc.AxisError, match="out of range"):
            build()(torch.ones(3, 4))
        return
    with pytest.raises(tc.TricombError, match=match):
        build()
