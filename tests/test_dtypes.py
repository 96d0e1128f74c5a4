"""Result dtypes as torch's own ops give them: narrow integers wrap where torch's do (and nowhere else), weak
Python constants convert as in torch, ``dtype=`` on reduce/scan converts first and is the result's dtype, and
any/all give bool."""
import pytest
import torch

import tricomb as tc


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    torch.testing.assert_close(got.cpu(), want.cpu(), equal_nan=True, rtol=0, atol=0)


INT8 = [100, -100, 60, 3, -128, 127]


@pytest.mark.parametrize("fn", [lambda v: v * 2 < 0, lambda v: v * 2, lambda v: -v, lambda v: v + v > v,
                                lambda v: (v * 3 - 7) * (v + 1)], ids=["mul-then-compare", "mul", "neg",
                                                                       "add-then-compare", "chain"])
def test_int8_arithmetic_wraps_in_int8_as_torch_does(device, fn):
    x = torch.tensor(INT8, dtype=torch.int8, device=device)
    _same(tc.map(fn)(x), fn(x.cpu()))


def test_mixed_integer_widths_compute_in_the_promoted_dtype(device):
    x = torch.tensor(INT8, dtype=torch.int8, device=device)
    y = torch.tensor([1000] * 6, dtype=torch.int16, device=device)
    fn = lambda a, b: a * b + a  # noqa: E731 - int16 result: wraps in int16, not in int8
    _same(tc.zip_with(fn)(x, y), fn(x.cpu(), y.cpu()))


@pytest.mark.parametrize("fn", [lambda v: v < -1, lambda v: v - -1, lambda v: v * -1, lambda v: v + 300],
                         ids=["lt-neg", "sub-neg", "mul-neg", "add-300"])
def test_integer_constants_wrap_into_the_tensor_dtype_as_weak_scalars(device, fn):
    x = torch.tensor([0, 1, 200, 255], dtype=torch.uint8, device=device)
    _same(tc.map(fn)(x), fn(x.cpu()))


def test_sum_of_int8_accumulates_in_int64(device):
    x = torch.full((300,), 100, dtype=torch.int8, device=device)
    _same((tc.map(lambda v: v * 1) >> tc.sum())(x), torch.tensor(30000))


@pytest.mark.parametrize("stage, torch_fn", [
    (tc.sum(dtype=torch.bfloat16), lambda x: torch.sum(x, dtype=torch.bfloat16)),
    (tc.sum(dtype=torch.int32), lambda x: torch.sum(x, dtype=torch.int32)),
    (tc.prod(dtype=torch.float64), lambda x: torch.prod(x, dtype=torch.float64)),
    (tc.mean(dtype=torch.float32), lambda x: torch.mean(x, dtype=torch.float32)),
    (tc.cumsum(dtype=torch.int8), lambda x: torch.cumsum(x, 0, dtype=torch.int8)),
    (tc.reduce(tc.add, dtype="float16"), lambda x: torch.sum(x, dtype=torch.float16)),
], ids=["sum-bf16", "sum-int32", "prod-f64", "mean-f32", "cumsum-int8", "reduce-add-f16"])
def test_dtype_argument_converts_before_combining(device, stage, torch_fn):
    x = torch.arange(-6, 7, dtype=torch.int64, device=device) * 23
    _same(stage(x), torch_fn(x.cpu()))


def test_dtype_argument_survives_printing_and_parsing():
    pipe = tc.map(tc.abs) >> tc.sum(axis=1, keepdim=True, dtype=torch.int32)
    assert str(pipe) == "map abs | sum(axis=1, keepdim=True, dtype=int32)"
    assert tc.parse(str(pipe)) == pipe


def test_dtype_argument_is_refused_where_torch_has_none():
    with pytest.raises(tc.TricombError, match="not dtype="):
        tc.max(dtype=torch.float32)
    with pytest.raises(tc.UnsupportedError, match="torch.amax has none"):
        tc.reduce(tc.maximum, dtype=torch.float32)
    with pytest.raises(tc.DTypeError, match="dtype='float8'"):
        tc.sum(dtype="float8")


def test_mean_of_integers_without_dtype_is_an_error_as_in_torch():
    with pytest.raises(tc.StageError, match="mean"):
        tc.mean()(torch.arange(4))


@pytest.mark.parametrize("name", ["any", "all"])
def test_any_and_all_follow_torch(device, name):
    x = torch.tensor([[0.0, 0.5, float("nan")], [0.0, 0.0, 0.0], [1.0, 2.0, -1.0]], device=device)
    torch_fn = getattr(torch, name)
    stage = getattr(tc, name)
    _same(stage(axis=1)(x), torch_fn(x.cpu(), 1))
    _same(stage()(x), torch_fn(x.cpu()))
    u = torch.tensor([0, 3, 0], dtype=torch.uint8, device=device)
    _same(stage()(u), torch_fn(u.cpu()))  # uint8 in, uint8 out, as torch
    _same((tc.map(lambda v: v > 0) >> stage(axis=0, keepdim=True))(x), torch_fn(x.cpu() > 0, 0, keepdim=True))
