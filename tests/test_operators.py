"""User reduce/scan operators: functions of two values with an identity. Their laws are checked on a sample when
the stage is built (associativity; commutativity for a reduce; the identity), and their results equal the
sequential float64 fold (tricomb.testing's oracle)."""
import enum
import fractions

import numpy as np
import pytest
import triton
import triton.language as tl
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
    """int32's lowest value is maximum's identity for int32 values (so the stage builds), and no int8 value."""
    with pytest.raises(tc.DTypeError, match="identity=-2147483648 does not fit the int8"):
        tc.scan(tc.maximum, identity=-2**31, exclusive=True)(torch.tensor([1, 2], dtype=torch.int8))


def test_torch_errors_inside_an_operator_are_located_and_explained():
    """A float-only sample meets a bitwise operator: torch's refusal is reported with the operator's location. (Not
    the builtin bitwise_and itself, whose identity is checked exactly, without a sample.)"""
    with pytest.raises(tc.LawError, match="cannot be evaluated by torch on \\(float64, float64\\) values") as info:
        tc.reduce(lambda a, b: a & b & -1, identity=0.5)
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


# --- Operators that tiling breaks are refused: the sample reaches where they break (found accepted by review) ---

@triton.jit
def _saturating_add(a, b):
    return tl.minimum(a + b, 1e6)


_CAP = 2.0 ** 40


@triton.jit
def _add_capped_at_a_global(a, b):
    total = a + b
    return tl.where(total > _CAP, _CAP, total)


BROKEN_BY_TILING = {  # (operator, identity): each passed the old sample of floats within 1e3 and integers within 5
    "saturating add": (lambda a, b: tc.minimum(a + b, 1e6), 0.0),
    "saturating add by where": (lambda a, b: tc.where(a + b > 1e6, 1e6, a + b), 0.0),
    "saturating @triton.jit add": (_saturating_add, 0.0),
    "add capped at a @triton.jit global": (_add_capped_at_a_global, 0.0),
    "threshold restart": (lambda a, b: tc.where(b > 1e6, b, a + b), 0.0),  # b if b > t else a + b
    "add wrapped past 2**20": (lambda a, b: tc.where(a + b > 2 ** 20, a + b - 2 ** 21, a + b), 0),
    "bitwise or, capped past 4096": (lambda a, b: tc.where((a | b) > 4096, a, a | b), 0),  # integers alone
}


@pytest.mark.parametrize("name", sorted(BROKEN_BY_TILING))
@pytest.mark.parametrize("kind", ["reduce", "scan"])
def test_operators_that_break_away_from_small_values_are_refused(name, kind):
    """Associative on small values, not near their constants (a @triton.jit function's read from its source)."""
    op, identity = BROKEN_BY_TILING[name]
    stage = tc.reduce if kind == "reduce" else tc.scan
    with pytest.raises(tc.LawError, match=r"not associative: with a=.*\(a op b\) op c = .* but a op \(b op c\) ="):
        stage(op, identity=identity)


def test_the_verdict_and_its_counterexample_are_the_same_every_time():
    messages = set()
    for _ in range(2):
        with pytest.raises(tc.LawError) as info:
            tc.check_laws(lambda a, b: tc.minimum(a + b, 1e6), 0.0)
        messages.add(info.value.message)
    assert len(messages) == 1


def test_a_user_identity_that_holds_in_another_dtype_is_checked_in_the_values_dtype(device):
    """2**31 - 1 is a minimum's identity for int32 values alone: on float32 values above it, padding with it gave
    2147483648 (the old sample stopped at 1e3); finfo(float32).max is one for float32 values alone."""
    smaller = lambda a, b: tc.where(a < b, a, b)  # noqa: E731
    pipe = tc.reduce(smaller, identity=2 ** 31 - 1, axis=1)
    x = torch.full((2, 5), 3e9, device=device)
    with pytest.raises(tc.LawError, match=r"identity=2147483647 is not an identity .* \(computed in float32\)"):
        pipe(x)
    assert torch.equal(pipe(x.int() // 2).cpu(), (x.int() // 2).cpu().amin(1))
    with pytest.raises(tc.LawError, match="is not an identity"):
        pipe(x.long())
    pipe = tc.reduce(smaller, identity=float(torch.finfo(torch.float32).max), axis=1)
    assert torch.equal(pipe(x).cpu(), x.cpu().amin(1))
    with pytest.raises(tc.LawError, match="is not an identity"):
        pipe(x.double())


# --- Correct operators are accepted ---

MAX_PLUS = (lambda a1, b1, a2, b2: (a1 + a2, tc.maximum(b1 + a2, b2)), (0.0, -inf))  # h -> max(h + a, b), composed


def test_a_max_plus_recurrence_with_an_infinite_identity_is_accepted_and_right(device):
    """h[t] = max(h[t-1] + a[t], b[t]) from h = -inf. Refused before: the integer sample turned -inf into the lowest
    int64, where b1 + a2 wraps. Integer values are still refused when the stage runs: there it does wrap."""
    op, identity = MAX_PLUS
    assert tc.check_laws(op, identity) == tc.Laws(True, False)
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(3, 70, generator=g), torch.randn(3, 70, generator=g) * 4
    b[:, ::9] = -inf
    pairs = tc.zip_with(lambda u, v: (u, v))
    scan, reduce = pairs >> tc.scan(op, axis=1, identity=identity), pairs >> tc.reduce(op, axis=1, identity=identity)
    state, want = torch.full((3,), -inf, dtype=torch.float64), []
    for t in range(70):
        state = torch.maximum(state + a[:, t].double(), b[:, t].double())
        want.append(state)
    with schedule_overrides(BLOCK_K=16, SPLIT=2):
        total, h = scan(a.to(device), b.to(device))
        last = reduce(a.to(device), b.to(device))[1]
    torch.testing.assert_close(h.cpu().double(), torch.stack(want, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(total.cpu(), torch.cumsum(a, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(last.cpu().double(), want[-1], rtol=1e-5, atol=1e-5)
    with pytest.raises(tc.LawError, match=r"not associative.*\(computed in int64\)"):
        scan(a.long().to(device), b.clamp(-9, 9).long().to(device))


# --- A builtin operator's identity is checked exactly ---

def test_a_builtin_given_another_identity_is_refused_with_its_own():
    """maximum(identity=-10000.0) was sampled within 1e3 and passed; it gave -10000 for a row of -50000s."""
    with pytest.raises(tc.LawError, match=r"identity=-10000.0 is not an identity of maximum: maximum's identity is "
                                          r"-inf \(for integers the dtype's lowest value, for bools False\)"):
        tc.reduce(tc.maximum, identity=-10000.0)
    for op, wrong in [(tc.maximum, -10000), (tc.minimum, 1e300), (tc.add, -0.0), (tc.add, 1), (tc.mul, 1.5),
                      (lambda a, b: a * b, 2), (tc.bitwise_and, 0.5), (tc.logaddexp, -1e308),
                      (tc.logical_or, True), (tc.logical_and, 0)]:
        with pytest.raises(tc.LawError, match="is not an identity of"):
            tc.reduce(op, identity=wrong)
    for op, own in [(tc.maximum, -inf), (tc.minimum, inf), (tc.add, 0), (tc.add, 0.0), (tc.mul, 1),
                    (tc.bitwise_and, -1), (tc.bitwise_or, 0), (tc.logical_and, True), (tc.logical_or, False),
                    (lambda a, b: b + a, 0.0)]:
        tc.reduce(op, identity=own)
    fanned = tc.zip_with(lambda u, v: (u, v)) >> tc.reduce(lambda a, b, c, d: (tc.maximum(a, c), b + d),
                                                           identity=(-inf, 0.0))
    assert fanned(torch.tensor([1.0, 3.0]), torch.tensor([1.0, 3.0]))[0].item() == 3.0
    with pytest.raises(tc.LawError, match=r"identity=1.0 \(field 1\) is not an identity of add"):
        tc.reduce(lambda a, b, c, d: (tc.maximum(a, c), b + d), identity=(-inf, 1.0))


def test_a_builtin_integer_identity_is_checked_in_the_values_dtype(device):
    """-128 is maximum's identity for int8 values, and 255 bitwise_and's for uint8 ones, and neither for others."""
    x = torch.tensor([[-5, -7, -100]], dtype=torch.int8, device=device)
    assert tc.reduce(tc.maximum, identity=-128, axis=1)(x).tolist() == [-5]
    with pytest.raises(tc.LawError, match="-128 is not an identity of maximum for int32 values: maximum's identity "
                                          "is -2147483648"):
        tc.reduce(tc.maximum, identity=-128, axis=1)(x.int())
    with pytest.raises(tc.LawError, match="-128 is not an identity of maximum for float32 values: maximum's "
                                          "identity is -inf"):
        tc.reduce(tc.maximum, identity=-128, axis=1)(x.float() * 10)
    u = torch.tensor([0b1101, 0b0111], dtype=torch.uint8, device=device)
    assert tc.reduce(tc.bitwise_and, identity=255)(u).item() == 0b0101
    with pytest.raises(tc.LawError, match="for int16 values: bitwise_and's identity is -1"):
        tc.reduce(tc.bitwise_and, identity=255)(u.to(torch.int16))


def test_identities_equal_as_numbers_are_checked_apart():
    """0.0 and False compare equal; a check of one answered for the other (a cache keyed on the value). The square
    of a maximum is an or on truth values, and no operator at all on numbers."""
    def reduce_with(identity):
        return tc.reduce(lambda a, b: tc.maximum(a, b) * tc.maximum(a, b), identity=identity)
    reduce_with(False)
    with pytest.raises(tc.LawError, match="not associative"):
        reduce_with(0.0)


# --- identity= becomes the plain number it equals ---

class _Zero(enum.IntEnum):
    ZERO = 0


class _LoudFloat(float):
    def __repr__(self):
        return "__import__('os').system('echo pwned')"


class _LyingInt(int):
    def __index__(self):
        return 7

    def __int__(self):
        return 7


@pytest.mark.parametrize("value, plain", [(_Zero.ZERO, 0), (_LyingInt(0), 0), (np.int64(0), 0), (np.uint8(0), 0),
                                          (np.float32(0.0), 0.0), (_LoudFloat(0.0), 0.0), (np.float64(-0.0), -0.0),
                                          ([np.float64(0.0), _Zero.ZERO], (0.0, 0))],
                         ids=lambda v: type(v).__name__)
def test_identities_become_the_plain_numbers_they_equal(value, plain):
    """An int subclass, a numpy scalar, a float subclass with a hostile repr: each is the plain bool, int or float
    it equals (by its own value, not its methods), so nothing of the caller's type reaches the emitted source."""
    k = len(plain) if isinstance(plain, tuple) else 1
    op = (lambda a, b: a + b + 0.25 * a * b) if k == 1 else (lambda a, b, c, d: (a + c + a * c, b + d + b * d))
    pipe = tc.reduce(op, axis=1, identity=value)
    kept = pipe.ir.stages[0].identity
    assert type(kept) is type(plain) and kept == plain and repr(kept) == repr(plain)
    assert all(type(v) in (bool, int, float) for v in (kept if isinstance(kept, tuple) else (kept,)))
    x = torch.rand(3, 5)
    if k == 1:
        assert "pwned" not in pipe.source(x) and "pwned" not in str(pipe)
        assert_matches_torch(pipe, x)


def test_bool_identities_stay_bool_and_inexact_ones_are_refused():
    either = lambda a, b: tc.logical_or(a, b)  # noqa: E731
    for value in (False, np.bool_(False)):
        kept = tc.scan(lambda a, b: tc.logical_or(a, b) | a, identity=value).ir.stages[0].identity
        assert kept is False
    assert tc.reduce(either, identity=np.bool_(False)).ir.stages[0].identity is False
    inexact = [fractions.Fraction(1, 3), 2 ** 2000]
    if np.finfo(np.longdouble).eps < np.finfo(np.float64).eps:
        inexact.append(np.longdouble("0.1"))
    for value in inexact:
        with pytest.raises(tc.ArgumentError, match="identity= holds"):
            tc.reduce(lambda a, b: a + b * 1, identity=value)
    assert tc.reduce(lambda a, b: a + b * 1, identity=fractions.Fraction(0, 1)).ir.stages[0].identity == 0
    for value in ["0", 1j, torch.tensor(0.0), None.__class__]:
        with pytest.raises(tc.ArgumentError, match="identity= must be a Python number"):
            tc.reduce(lambda a, b: a + b * 1, identity=value)


# --- check_laws on the user's own values, and in given dtypes ---

def test_check_laws_on_the_users_own_values():
    """The Welford merge is refused on tricomb's sample (counts that cancel to 0) and holds on real (count, mean,
    squared deviations) triples; a saturating add holds on values that never reach the cap and is refused on
    values that do: a check on samples proves the laws on what they hold."""
    from tricomb.library import WELFORD
    g = torch.Generator().manual_seed(0)
    counts = torch.randint(1, 4, (200,), generator=g).double()
    fields = (counts, torch.randn(200, generator=g), torch.rand(200, generator=g) * (counts - 1))
    with pytest.raises(tc.LawError, match="not associative"):
        tc.check_laws(WELFORD, (0.0, 0.0, 0.0))
    assert tc.check_laws(WELFORD, (0.0, 0.0, 0.0), samples=fields) == tc.Laws(True, True)
    capped = lambda a, b: tc.minimum(a + b, 1e6)  # noqa: E731
    assert tc.check_laws(capped, 0.0, samples=torch.rand(100, generator=g)).associative
    with pytest.raises(tc.LawError, match=r"not associative: with a=9e\+05|not associative: with a=.*"):
        tc.check_laws(capped, 0.0, samples=torch.tensor([9e5, 3e5, -4e5]))
    with pytest.raises(tc.LawError, match="identity=-10.0 is not an identity"):
        tc.check_laws(lambda a, b: tc.where(a > b, a, b), -10.0, samples=torch.tensor([-20.0, 5.0]))
    assert tc.check_laws(lambda a, b: a | b, 0, samples=torch.tensor([1, 2, 4], dtype=torch.int8)).commutative
    half = tc.check_laws(lambda a, b: a + b + 0.25 * a * b, 0.0, samples=torch.randn(4, 5, generator=g).half())
    assert half == tc.Laws(True, True)  # (checked in float32, as a kernel combines float16 values)


def test_check_laws_in_given_dtypes():
    smaller = lambda a, b: tc.where(a < b, a, b)  # noqa: E731
    assert tc.check_laws(smaller, 2 ** 31 - 1, dtypes=torch.int32).associative
    assert tc.check_laws(smaller, 2 ** 31 - 1, dtypes="int32").commutative
    for dtypes in (torch.int64, torch.float32):
        with pytest.raises(tc.LawError, match="identity=2147483647 is not an identity"):
            tc.check_laws(smaller, 2 ** 31 - 1, dtypes=dtypes)
    with pytest.raises(tc.LawError, match=r"not associative.*\(computed in int64\)"):
        tc.check_laws(MAX_PLUS[0], MAX_PLUS[1], dtypes=(torch.int64, torch.int64))
    assert tc.check_laws(tc.maximum, -128, dtypes=torch.int8).commutative
    with pytest.raises(tc.LawError, match="for int16 values"):
        tc.check_laws(tc.maximum, -128, dtypes=torch.int16)


@pytest.mark.parametrize("arguments, message", [
    (dict(samples=[torch.ones(3)] * 2), "samples= must be a tensor .* or a sequence of 1 tensors"),
    (dict(samples="values"), "samples= must be a tensor"),
    (dict(samples=torch.ones(0)), "samples= holds no values"),
    (dict(dtypes=torch.complex64), "dtypes= must be a torch dtype"),
    (dict(dtypes=(torch.float32,) * 3), "dtypes= must be a torch dtype .* or a sequence of 1, one per field"),
    (dict(dtypes=torch.int8, identity=1000), "identity=1000 holds 1000, which is not a value of int8"),
])
def test_check_laws_refuses_malformed_samples_and_dtypes(arguments, message):
    identity = arguments.pop("identity", 0.0)
    with pytest.raises(tc.ArgumentError, match=message):
        tc.check_laws(lambda a, b: a + b * 1, identity, **arguments)


def test_a_changed_global_of_a_jit_operator_is_checked_again():
    """The law check's verdict is kept per value of the globals the operator reads: with CAP infinite the
    operator is an add; capped at 1e6 it saturates, which tiling would make wrong."""
    from scripts import jit_laws
    x = torch.full((64,), 4e5)
    pipe = tc.reduce(jit_laws.capped_add, identity=0.0)
    try:
        torch.testing.assert_close(pipe(x), x.sum())
        jit_laws.CAP = 1e6
        with pytest.raises(tc.LawError):
            pipe(x)
    finally:
        jit_laws.CAP = float("inf")


@pytest.mark.parametrize("op", [tc.add, lambda a, b: a * b + a + b])
@pytest.mark.parametrize("samples", [torch.empty(0), [1.0, 2.0]])
def test_samples_that_are_not_a_sample_are_refused_for_every_operator(op, samples):
    with pytest.raises(tc.ArgumentError, match="samples="):
        tc.check_laws(op, 0.0, samples=samples)
