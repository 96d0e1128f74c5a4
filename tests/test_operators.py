"""User reduce/scan operators: functions of two values with an identity. Their laws are checked on a sample when
the stage is built (associativity; commutativity for a reduce; the identity), and their results equal the
sequential float64 fold (tricomb.testing's oracle)."""
import pytest
import triton
import torch
from hypothesis import given, note
from hypothesis import strategies as st

import tricomb as tc
from tricomb.testing import assert_matches_torch, schedule_overrides

from conftest import DEVICES

inf = float("inf")

# (operator, identity): associative, with that identity; the last two do not commute (reduced in order)
ASSOCIATIVE = {
    "add": (lambda a, b: a + b, 0.0),
    "mul": (lambda a, b: a * b, 1.0),
    "max-by-where": (lambda a, b: tc.where(a > b, a, b), -inf),
    "x+y+kxy": (lambda a, b: a + b + 0.25 * a * b, 0.0),  # (1 + kx)(1 + ky) = 1 + k(x o y)
    "logaddexp-by-hand": (lambda a, b: tc.where(tc.maximum(a, b) == -inf, -inf,
                                                tc.maximum(a, b) + tc.log1p(tc.exp(-tc.abs(a - b)))), -inf),
    "last-nonzero": (lambda a, b: tc.where(b != 0, b, a), 0.0),
    "first": (lambda a, b: a, None),
}
NOT_ASSOCIATIVE = {
    "alpha*a+b": lambda a, b: 0.5 * a + b,
    "a-b": lambda a, b: a - b,
    "mean-of-two": lambda a, b: (a + b) * 0.5,
    "a*b+1": lambda a, b: a * b + 1.0,
}


@given(name=st.sampled_from(sorted(ASSOCIATIVE)), kind=st.sampled_from(["reduce", "scan"]),
       rows=st.integers(1, 5), cols=st.integers(1, 40), axis=st.sampled_from([0, 1, -1]),
       reverse=st.booleans(), exclusive=st.booleans(), tiny=st.booleans(), seed=st.integers(0, 2**16),
       with_identity=st.booleans())
def test_associative_user_operators_match_the_sequential_fold(name, kind, rows, cols, axis, reverse, exclusive, tiny,
                                                                seed, with_identity):
    """With its identity, or without (a validity flag then pads the tiles; no exclusive scan without one)."""
    op, identity = ASSOCIATIVE[name]
    identity = identity if with_identity else None
    exclusive = exclusive and identity is not None
    x = torch.rand(rows, cols, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    if name == "mul":
        x = x * 0.5 + 1.0  # products in range
    pipe = tc.reduce(op, axis=axis, identity=identity) if kind == "reduce" else \
        tc.scan(op, axis=axis, reverse=reverse, exclusive=exclusive, identity=identity)
    note(str(pipe))
    tiles = {"BLOCK_M": 2, "BLOCK_K": 4, "SPLIT": 3} if tiny else {}
    for device in DEVICES:
        with schedule_overrides(**tiles):
            assert_matches_torch(pipe, x.to(device))


# operators on pairs: (operator, identity, whether it commutes, how to draw its two fields from uniform [0, 1) u, w)
PAIR_OPERATORS = {
    "linear-recurrence": (lambda v1, d1, v2, d2: (v1 * d2 + v2, d1 * d2), (0.0, 1.0), False,
                          lambda u, w: (2 * u - 1, w)),
    "sum-and-count": (lambda s1, n1, s2, n2: (s1 + s2, n1 + n2), (0.0, 0.0), True, lambda u, w: (2 * u - 1, w)),
    "complex-multiply": (lambda a, b, c, d: (a * c - b * d, a * d + b * c), (1.0, 0.0), True,
                         lambda u, w: (1 + 0.1 * (u - 0.5), 0.1 * (w - 0.5))),
    "max-with-payload": (lambda v1, p1, v2, p2: (tc.where(v2 > v1, v2, v1), tc.where(v2 > v1, p2, p1)),
                         (-inf, 0.0), False, lambda u, w: (u, w)),  # the first maximum's payload: ties decide order
}


@given(name=st.sampled_from(sorted(PAIR_OPERATORS)), reduce=st.booleans(), rows=st.integers(1, 5),
       cols=st.integers(1, 40), axis=st.sampled_from([0, 1, -1]), reverse=st.booleans(), exclusive=st.booleans(),
       tiny=st.booleans(), seed=st.integers(0, 2**16), with_identity=st.booleans())
def test_pair_operators_match_the_sequential_fold(name, reduce, rows, cols, axis, reverse, exclusive, tiny, seed,
                                                  with_identity):
    """Operators on pairs (4 arguments, 2 results), by reduce (in order when they do not commute) or by scan,
    field by field against the float64 sequential fold; with and without their identity."""
    op, identity, _, draw = PAIR_OPERATORS[name]
    gen = torch.Generator().manual_seed(seed)
    fields = draw(torch.rand(rows, cols, generator=gen), torch.rand(rows, cols, generator=gen))
    identity = identity if with_identity else None
    pairs = tc.zip_with(lambda a, b: (a, b))
    stage = tc.reduce(op, axis=axis, identity=identity) if reduce else \
        tc.scan(op, axis=axis, reverse=reverse, exclusive=exclusive and with_identity, identity=identity)
    note(str(stage))
    tiles = {"BLOCK_M": 2, "BLOCK_K": 4, "SPLIT": 3} if tiny else {}
    for device in DEVICES:
        with schedule_overrides(**tiles):
            assert_matches_torch(pairs >> stage, *(f.to(device) for f in fields))


def test_a_non_associative_pair_operator_is_refused():
    with pytest.raises(tc.LawError, match=r"not associative: with a=\(.*, .*\), b="):
        tc.zip_with(lambda a, b: (a, b)) >> tc.scan(lambda v1, d1, v2, d2: (0.5 * v1 + v2, d1 * d2),
                                                    identity=(0.0, 1.0))


@pytest.mark.parametrize("name", sorted(NOT_ASSOCIATIVE))
@pytest.mark.parametrize("kind", ["reduce", "scan"])
def test_non_associative_operators_are_refused_with_a_counterexample(name, kind):
    stage = tc.reduce if kind == "reduce" else tc.scan
    with pytest.raises(tc.LawError, match=r"not associative: with a=.*\(a op b\) op c = .* but a op \(b op c\) ="):
        stage(NOT_ASSOCIATIVE[name], identity=0.0)


def test_a_wrong_identity_is_refused():
    with pytest.raises(tc.LawError, match=r"identity=1.0 (is not an identity|op identity is 2.0)"):
        tc.reduce(lambda a, b: a + b, identity=1.0)
    with pytest.raises(tc.LawError, match="is not an identity"):
        tc.scan(lambda a, b: a, identity=0.0)  # the first element: associative, but has no identity (leave it out)


def _first(a, b):
    return a  # associative, not commutative, and without an identity


def test_an_operator_without_identity_gets_a_validity_flag(device):
    """The first element in scan order, forward and reverse, with tiles that end mid-row: padded lanes are
    invalid, not a made-up neutral value."""
    x = torch.randn(3, 37, device=device)
    with schedule_overrides(BLOCK_M=2, BLOCK_K=8):
        forward = tc.scan(_first, axis=1)(x)
        backward = tc.scan(_first, axis=1, reverse=True)(x)
    assert torch.equal(forward.cpu(), x.cpu()[:, :1].expand(3, 37))
    assert torch.equal(backward.cpu(), x.cpu()[:, -1:].expand(3, 37))


@pytest.mark.parametrize("split", [1, 3])
def test_a_reduce_without_identity_over_split_rows(split, device):
    x = torch.randn(4, 300, device=device)
    pipe = tc.reduce(ASSOCIATIVE["x+y+kxy"][0], axis=1)
    with schedule_overrides(SPLIT=split, BLOCK_K=16):
        assert_matches_torch(pipe, x * 0.1)


def test_an_operator_without_identity_cannot_reduce_nothing_or_start_an_exclusive_scan():
    with pytest.raises(tc.StageError, match="has no identity, so it cannot reduce 0 elements"):
        tc.reduce(lambda a, b: a + b + a * b, axis=1)(torch.ones(3, 0))
    with pytest.raises(tc.UnsupportedError, match="first element is its operator's identity"):
        tc.scan(_first, exclusive=True)
    assert tc.reduce(lambda a, b: a + b + a * b, axis=0)(torch.ones(3, 0)).shape == (0,)  # nothing to combine into


def test_the_identity_combined_with_itself_must_give_it_back():
    """Lanes past the end of a tile hold the identity: -inf - -inf is NaN in an unguarded log-add-exp."""
    with pytest.raises(tc.LawError, match=r"is not an identity .*: -inf op -inf = nan, not -inf"):
        tc.reduce(lambda a, b: tc.maximum(a, b) + tc.log1p(tc.exp(-tc.abs(a - b))), identity=-inf)


def _last_nonzero(a, b):
    return tc.where(b != 0, b, a)  # associative, identity 0, but b o a != a o b


@pytest.mark.parametrize("tiles", [{}, {"BLOCK_M": 2, "BLOCK_K": 4}, {"BLOCK_K": 4, "SPLIT": 3}],
                         ids=["heuristic", "tiny-tiles", "split-rows"])
def test_an_operator_that_does_not_commute_is_reduced_in_order(tiles, device):
    """Row-major order over the reduced axes, across tiles and across the programs sharing a row (their partials
    combined in index order), for any layout: the last nonzero element, and the first element."""
    laws = tc.check_laws(_last_nonzero, 0.0)
    assert laws.associative and not laws.commutative
    x = torch.randn(5, 3, 41, device=device)
    x[x.abs() < 0.5] = 0.0
    t = x.transpose(0, 2)  # (41, 3, 5), reduced over axes 0 and 2 in row-major order
    with schedule_overrides(**tiles):
        assert_matches_torch(tc.reduce(_last_nonzero, axis=-1, identity=0.0), x)
        assert_matches_torch(tc.reduce(_last_nonzero, axis=(0, 2), identity=0.0), t)
        assert_matches_torch(tc.reduce(lambda a, b: a, axis=(0, 2)), t)


def test_a_scan_keeps_the_order(device):
    x = torch.tensor([[0.0, 3.0, 0.0, 0.0, 5.0, 0.0, 7.0, 0.0]], device=device)
    with schedule_overrides(BLOCK_M=2, BLOCK_K=4):
        got = tc.scan(_last_nonzero, axis=1, identity=0.0)(x)
    assert got.cpu().tolist() == [[0.0, 3.0, 3.0, 3.0, 5.0, 5.0, 7.0, 7.0]]


def test_integer_user_operators_are_exact(device):
    x = torch.randint(-1000, 1000, (3, 77), dtype=torch.int32, device=device)
    got = tc.reduce(lambda a, b: tc.where(a < b, a, b), axis=1, identity=2**31 - 1)(x)
    assert torch.equal(got.cpu(), x.cpu().amin(1))
    got = tc.scan(lambda a, b: a + b * 1, axis=1, identity=0)(x)  # not the builtin add: no int64 promotion
    assert got.dtype == torch.int32 and torch.equal(got.cpu(), torch.cumsum(x.cpu(), 1, dtype=torch.int32))


@triton.jit
def _soft_or(a, b):
    return a + b - a * b


def test_a_triton_jit_operator_is_inlined_as_the_combine(device):
    x = torch.rand(4, 50, device=device)
    pipe = tc.reduce(_soft_or, axis=1, identity=0.0)
    assert "def user__soft_or(a, b):" in pipe.source(x)
    assert_matches_torch(pipe, x)
    assert_matches_torch(tc.scan(_soft_or, axis=0, identity=0.0, reverse=True), x)


def test_a_saturating_operator_is_refused_though_associative_near_zero():
    """Found by the hostile review: samples within [-2, 2] never reach the threshold; the sample now does."""
    with pytest.raises(tc.LawError, match="not associative"):
        tc.reduce(lambda a, b: tc.where(a + b > 10.0, 10.0, a + b), identity=0.0)


def test_a_fractional_identity_is_checked_on_floats_only(device):
    x = torch.tensor([1.0, 2.0, 3.0], device=device)
    assert tc.scan(lambda a, b: a + b - 0.5, identity=0.5)(x).tolist() == [1.0, 2.5, 5.0]


def test_an_identity_that_does_not_fit_the_values_is_refused_before_launch():
    with pytest.raises(tc.DTypeError, match="identity=-1000 does not fit the int8"):
        tc.scan(tc.maximum, identity=-1000, exclusive=True)(torch.tensor([1, 2], dtype=torch.int8))


def test_torch_errors_inside_an_operator_are_located_and_explained():
    """A float-only sample meets a bitwise operator: torch's refusal is reported with the operator's location."""
    with pytest.raises(tc.LawError, match="cannot be evaluated by torch on \\(float64, float64\\) values") as info:
        tc.reduce(lambda a, b: a & b, identity=0.5)
    assert info.value.location.file == __file__


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool])
def test_bitwise_operators_reduce_and_scan_integers_and_bools(dtype, device):
    """bitwise_and (identity: all ones), bitwise_or and bitwise_xor (0): reduces and scans in every direction
    against the element-by-element fold, the dtype kept; `&`, `|`, `^` in scalar functions; floats refused."""
    x = (torch.randint(0, 2, (5, 40)) > 0 if dtype == torch.bool else
         torch.randint(torch.iinfo(dtype).min, torch.iinfo(dtype).max, (5, 40), dtype=dtype)).to(device)
    for op in (tc.bitwise_and, tc.bitwise_or, tc.bitwise_xor):
        with schedule_overrides(BLOCK_K=8, SPLIT=2):
            assert_matches_torch(tc.reduce(op, axis=1), x)
        for reverse, exclusive in ((False, False), (True, True)):
            assert_matches_torch(tc.scan(op, axis=1, reverse=reverse, exclusive=exclusive), x)
    if dtype != torch.bool:
        got = tc.map(lambda v: (v & 6) | (v ^ 1))(x)
        assert torch.equal(got.cpu(), ((x.cpu() & 6) | (x.cpu() ^ 1)))
    with pytest.raises(tc.StageError, match="takes integers and bools, as torch's, not floats"):
        tc.map(lambda v: v & 1)(torch.ones(3, device=device))


def test_laws_are_checked_on_tuples_mixing_bool_and_number_fields():
    """A field whose identity is a bool is sampled as truth values, the others as numbers, all of one length
    (a bool beside a number field made the integer sample's fields differ in length: a RuntimeError)."""
    laws = tc.check_laws(lambda a, b, c, d: (tc.maximum(a, c), b | d), identity=(-2**31, False))
    assert laws.associative and laws.commutative
    with pytest.raises(tc.LawError, match="not associative"):
        tc.check_laws(lambda a, b, c, d: (a - c, b | d), identity=(0, False))


def test_an_identity_is_checked_on_every_field_when_the_first_is_a_bool():
    """With a bool first field, the check of a number field's identity was skipped: (False, 0.5) passed, and a
    scan from it added 0.5 to every element."""
    op = lambda c1, a1, c2, a2: (tc.logical_or(c1, c2), a1 + a2)  # noqa: E731
    assert tc.check_laws(op, (False, 0.0)).associative
    for wrong in [(False, 0.5), (False, float("nan"))]:
        with pytest.raises(tc.LawError, match="is not an identity"):
            tc.check_laws(op, wrong)


def test_identities_are_checked_as_values_of_their_fields():
    """An identity that is not a number is an ArgumentError (check_laws raised torch's TypeError); a list is a
    tuple, as in scan; a bool identity for number values is refused before launch (its field was sampled as
    truth values alone, so an operator that is not associative passed)."""
    add_pairs = lambda a1, b1, a2, b2: (a1 + a2, b1 + b2)  # noqa: E731
    for bad in [(0.0, None), (False, "0")]:
        with pytest.raises(tc.ArgumentError, match="identity= must be a Python number"):
            tc.check_laws(add_pairs, bad)
    assert tc.check_laws(add_pairs, [0.0, 0.0]).commutative
    with pytest.raises(tc.DTypeError, match="identity=False gives False for float32 values; give a number"):
        tc.scan(lambda x, y: x * x + y * y, identity=False)(torch.tensor([0.5, 2.0, 3.0]))


def test_integer_operators_with_an_identity_are_checked_on_integers(device):
    """A bitwise operator given identity= cannot be evaluated on the float sample; it is checked on the integer
    sample alone (it was refused). A fractional identity still makes it a float operator, refused."""
    x = torch.tensor([1, 2, 4, 8], device=device)
    assert tc.scan(tc.bitwise_or, identity=0)(x).tolist() == [1, 3, 7, 15]
    assert tc.reduce(lambda a, b: a & b, identity=-1)(x + 16).item() == 16
    with pytest.raises(tc.LawError, match="is not associative"):
        tc.scan(lambda a, b: (a | b) - 1, identity=0)
