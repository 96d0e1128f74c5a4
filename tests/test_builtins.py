"""Every row of the op table, run as a kernel, against its torch reference, at ordinary and special values."""
import itertools
import math

import pytest
import torch

import tricomb as tc
from tricomb.scalar.builtins import PUBLIC as OPS  # the rows users name (internal ones are the expand pass's)
from tricomb.testing import assert_matches_torch

inf, nan = math.inf, math.nan
SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-30, -1e-30, 1e-6, -1e-6, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0,
           3.0, -3.0, 19.9, 20.0, 20.1, -20.5, 88.0, -88.0, 100.0, -100.0, 1e4, -1e4]
UNARY = sorted(n for n, s in OPS.items() if s.arity == 1)
BINARY = sorted(n for n, s in OPS.items() if s.arity == 2)


def _values(device, dtype=torch.float32):
    generator = torch.Generator().manual_seed(0)
    spread = torch.randn(200, generator=generator) * 5
    return torch.cat([torch.tensor(SPECIAL), spread]).to(dtype).to(device)


@pytest.mark.parametrize("name", UNARY)
def test_unary_builtin_matches_torch(name, device):
    assert_matches_torch(tc.map(getattr(tc, name)), _values(device))


@pytest.mark.parametrize("name", UNARY)
def test_unary_builtin_in_half_precision(name, device):
    assert_matches_torch(tc.map(getattr(tc, name)), _values(device, torch.float16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_unary_builtins_give_a_zero_the_sign_torch_gives_it(dtype, device):
    """At +0.0 and -0.0 each builtin's zero results carry the sign torch gives them in float64, the oracle's
    precision (tanh(-0.0) is -0.0; torch's own float32 gelu gives +0.0 there, its float64 and float16 -0.0)."""
    x = torch.tensor([0.0, -0.0], dtype=dtype, device=device)
    for name in UNARY:
        want = OPS[name].torch(x.cpu().double())
        got = tc.map(getattr(tc, name))(x).cpu()
        if got.dtype.is_floating_point:
            assert torch.equal(torch.signbit(got), torch.signbit(want.to(got.dtype))), (name, got, want)


def _extremes(dtype):
    info = torch.iinfo(dtype)
    return torch.tensor(sorted({info.min, info.min + 1, max(info.min, -1), 0, 1, info.max - 1, info.max}), dtype=dtype)


def _takes(name, dtype) -> bool:
    try:
        OPS[name].torch(_extremes(dtype))
    except (RuntimeError, TypeError):
        return False
    return True


INTEGERS = (torch.int8, torch.uint8, torch.int32, torch.int64)


@pytest.mark.parametrize("name, dtype", [(n, d) for d in INTEGERS for n in UNARY if _takes(n, d)])
def test_unary_builtin_at_integer_extremes_then_compared(name, dtype, device):
    """At each end of the dtype's range, and compared and selected on after: the compiled code may assume nothing
    torch does not guarantee (abs(INT_MIN) is INT_MIN, so it is not above -1)."""
    x = _extremes(dtype).to(device)
    fn = getattr(tc, name)
    assert_matches_torch(tc.map(fn), x)
    assert_matches_torch(tc.map(lambda v: tc.where(fn(v) > -1, fn(v) * -2, fn(v) - 5)), x)


@pytest.mark.parametrize("name", BINARY)
def test_binary_builtin_matches_torch(name, device):
    """At pairs of special floats; the bitwise ops, which take integers only, at pairs of special integers."""
    if name.startswith("bitwise_"):
        ints = [0, 1, -1, 2, -2, 127, -128, 255, 2**31 - 1, -2**31, 2**40 + 3, -(2**62)]
        pairs = list(itertools.product(ints, repeat=2))
        a, b = (torch.tensor([p[i] for p in pairs], device=device) for i in (0, 1))
        assert torch.equal(tc.zip_with(getattr(tc, name))(a, b).cpu(), getattr(torch, name)(a.cpu(), b.cpu()))
        return
    pairs = list(itertools.product(SPECIAL[:17], repeat=2))
    a = torch.tensor([p[0] for p in pairs], device=device)
    b = torch.tensor([p[1] for p in pairs], device=device)
    assert_matches_torch(tc.zip_with(getattr(tc, name)), a, b)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("exponent", [0.5, -0.5, 2, 3.0, -1.0, -2, 0.0, 1.5])
def test_pow_by_a_number_is_torch_pow_for_every_float_dtype(exponent, dtype, device):
    """torch.pow(tensor, number) picks its kernel by exponent, dtype and device: 0.5 and -0.5 are sqrt and rsqrt,
    except in float16 on the CPU, where they are C's pow, as every exponent is there (pow(-0.0, 0.5) is 0.0 and
    pow(-inf, 0.5) inf, where sqrt gives -0.0 and NaN); 2 and 3 multiply. x ** c and tc.pow(x, c) give torch's
    values, NaN and the sign of zero included; a tensor of exponents is C's pow whatever its values."""
    x = torch.tensor([-inf, -0.0, 0.0, inf, nan, -2.0, 4.0, 1e-3, 0.7, -1.0], dtype=dtype, device=device)
    results = [(tc.map(lambda v: v ** exponent)(x), torch.pow(x, exponent)),
               (tc.map(lambda v: tc.pow(v, exponent))(x), torch.pow(x, exponent)),
               (tc.zip_with(tc.pow)(x, torch.full_like(x, exponent)), torch.pow(x, torch.full_like(x, exponent)))]
    for got, want in results:
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, equal_nan=True)
        zeros = want == 0
        assert torch.equal(got[zeros].signbit(), want[zeros].signbit()), (exponent, got, want)


def test_where_matches_torch(device):
    x = _values(device)
    assert_matches_torch(tc.zip_with(lambda c, a, b: tc.where(c > 0, a, b)), x, x * 2, -x)


def test_every_builtin_is_public_and_documented():
    for name, spec in OPS.items():
        fn = getattr(tc, name)
        assert fn.spec is spec and spec.doc in fn.__doc__


def test_softplus_uses_torch_threshold_of_20(device):
    x = torch.tensor([19.999, 20.0, 20.001, 25.0], device=device)
    torch.testing.assert_close(tc.map(tc.softplus)(x), torch.nn.functional.softplus(x))


def test_maximum_propagates_nan_unlike_triton(device):
    a = torch.tensor([1.0, math.nan, 3.0], device=device)
    b = torch.tensor([math.nan, 2.0, 1.0], device=device)
    got = tc.zip_with(tc.maximum)(a, b).cpu()
    assert math.isnan(got[0]) and math.isnan(got[1]) and got[2] == 3.0


def test_internal_rows_are_not_public():
    """The rows the expand pass writes (conversions, the position and count leaves) are no user's builtins."""
    from tricomb.errors import ParseError
    from tricomb.scalar.builtins import OPS as ALL
    internal = [name for name, spec in ALL.items() if spec.internal]
    assert {"position", "count", "to_int8"} <= set(internal)
    for name in internal:
        assert not hasattr(tc, name)
        with pytest.raises(ParseError):
            tc.parse(f"map {name}")


@pytest.mark.parametrize("name", ["argmax", "argmin", "cummax", "cummin"])
def test_tuple_operator_meaning_is_torch(name):
    """Each builtin operator on (value, position) pairs, its scalar function folded left to right over a row
    with ties, NaN and infinities, gives torch's argmax/argmin (last fold) or cummax/cummin (every prefix)."""
    from tricomb.pipeline.evaluate import evaluate_function
    from tricomb.scalar.builtins import TUPLE_OPS
    spec = TUPLE_OPS[name]
    row = torch.tensor([1.0, 3.0, -math.inf, 3.0, math.nan, 2.0, math.nan, math.inf, 3.0], dtype=torch.float64)
    for values in (row, row[[0, 1, 3, 5, 7, 8]], -row):
        acc = [torch.tensor(spec.identity[0], dtype=values.dtype), torch.tensor(spec.identity[1])]
        prefix_values, prefix_positions = [], []
        for i, v in enumerate(values):
            acc = evaluate_function(spec.function, acc + [v, torch.tensor(i)])
            prefix_values.append(acc[0])
            prefix_positions.append(acc[1])
        if name.startswith("arg"):
            assert int(acc[1]) == int(getattr(torch, name)(values))
        else:
            want = getattr(torch, name)(values, 0)
            torch.testing.assert_close(torch.stack(prefix_values), want.values, equal_nan=True)
            assert torch.equal(torch.stack(prefix_positions), want.indices)


def _subnormals(dtype):
    """Subnormal numbers of ``dtype`` (the smallest, some between, the largest) and the smallest normal one, each
    of both signs."""
    tiny = torch.finfo(dtype).tiny
    scales = [2.0 ** -23 if dtype == torch.float32 else 2.0 ** -52, 1e-3, 0.3, 0.999, 1.0]
    x = torch.tensor([s * tiny for s in scales], dtype=torch.float64).to(dtype)
    return torch.cat([x, -x])


def _assert_exact_to_rounding(got, want, name):
    """``got`` within four units in the last place of ``want`` (float64, the oracle's), counting a subnormal's
    place as the smallest subnormal: so 0.0, -0.0 or an infinity where ``want`` is a subnormal or a finite number
    fails."""
    info = torch.finfo(got.dtype)
    want = want.to(got.dtype).double()  # (beyond the dtype's range: its infinity)
    place = torch.maximum(want.abs() * info.eps, torch.tensor(info.tiny * info.eps, dtype=torch.float64))
    close = (got.double() - want).abs() <= 4 * place
    same = (got.double() == want) | (got.isnan() & want.isnan()) | close
    assert bool(same.all()), f"{name}: got {got[~same].tolist()}, float64 torch {want[~same].tolist()}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", UNARY)
def test_unary_builtin_keeps_subnormals(name, dtype, device):
    """At subnormal inputs each float builtin gives torch's value in float64, rounded: no step of the kernel
    flushes a subnormal to zero (floor(-1e-45) is -1, rsqrt(1e-40) is 1e20, sin(1e-40) is 1e-40)."""
    x = _subnormals(dtype).to(device)
    got = tc.map(getattr(tc, name))(x).cpu()
    if got.dtype.is_floating_point:
        _assert_exact_to_rounding(got, OPS[name].torch(x.cpu().double()), name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", [n for n in BINARY if not n.startswith("bitwise_")])
def test_binary_builtin_keeps_subnormals(name, dtype, device):
    """Subnormal operands, and products and quotients that are subnormal, give torch's value in float64,
    rounded."""
    x = _subnormals(dtype)
    a = torch.cat([x, x, torch.full_like(x, 3.0), x * 2 ** 20])
    b = torch.cat([torch.full_like(x, 3.0), x, x, torch.full_like(x, 2.0 ** -20)])
    got = tc.zip_with(getattr(tc, name))(a.to(device), b.to(device)).cpu()
    if got.dtype.is_floating_point:
        _assert_exact_to_rounding(got, OPS[name].torch(a.double(), b.double()), name)
