"""The torch meaning of a user @triton.jit function (tricomb/pipeline/jit_apply.py): the function itself, run
alone and elementwise by the oracle's own fixed kernel, never through a kernel tricomb plans and emits."""
import pytest
import torch
import triton
import triton.language as tl

import tricomb as tc
from tricomb.pipeline.evaluate import evaluate_function
from tricomb.runtime import loader
from tricomb.scalar.trace import to_function

SHIFT = tl.constexpr(0.5)


@triton.jit
def _scaled(x):
    return tl.sigmoid(x) * 3.0 + SHIFT  # Triton's own function, and a constexpr global


@triton.jit
def _outer(x, y):
    return _scaled(x) - y  # another user function


@triton.jit
def _linear(a, b):
    return a * 3 + b


def _made_in_a_closure(c):
    @triton.jit
    def scaled(x):
        return x * c
    return scaled


def _apply(fn, *args):
    return evaluate_function(to_function(fn, role="oracle"), list(args))[0]


@pytest.fixture
def no_tricomb_kernels(monkeypatch):
    """Loading any module tricomb emitted fails the test."""
    def refuse(*args):
        raise AssertionError("the oracle loaded a kernel module tricomb emitted")
    monkeypatch.setattr(loader, "_execute", refuse)


def test_calls_of_jit_functions_globals_and_library_functions(device, no_tricomb_kernels):
    x = torch.randn(5, 3, dtype=torch.float64, device=device)
    y = torch.randn(3, dtype=torch.float64, device=device)  # broadcast against x
    got = _apply(_outer, x, y)
    assert got.dtype == torch.float64 and got.shape == (5, 3)
    torch.testing.assert_close(got, torch.sigmoid(x) * 3.0 + 0.5 - y)


def test_a_closure_number_and_a_python_number_operand(device, no_tricomb_kernels):
    x = torch.randn(70, device=device)
    torch.testing.assert_close(_apply(_made_in_a_closure(2.5), x), x * 2.5)
    torch.testing.assert_close(_apply(lambda v: _linear(v, 2.0), x), x * 3 + 2.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.uint8,
                                   torch.int32, torch.int64, torch.bool])
def test_operands_are_computed_in_their_compute_dtype_and_the_result_converted(dtype, device, no_tricomb_kernels):
    """float16 and bfloat16 computed in float32 and rounded once (to nearest even); integers wrap in their own
    dtype; bools are nonzero; as the kernel computes a call of a user function."""
    a, b = ((torch.randn(300) * 60).to(dtype).to(device) for _ in range(2))
    wide = torch.float32 if dtype.is_floating_point else torch.int64
    want = (a.to(wide) * 3 + b.to(wide)).to(dtype)
    got = _apply(_linear, a, b)
    assert got.dtype == dtype
    if dtype == torch.float32:  # compiled, a * 3 + b may be one fused multiply-add: one rounding fewer
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    else:
        assert torch.equal(got, want)


def test_meta_and_empty_tensors_give_the_promoted_dtype_without_running(no_tricomb_kernels):
    meta = _apply(_linear, torch.empty(2, 3, dtype=torch.float16, device="meta"),
                  torch.empty((), dtype=torch.float64, device="meta"))  # a 0-d tensor promotes as a scalar
    assert meta.device.type == "meta" and meta.dtype == torch.float16 and meta.shape == (2, 3)
    empty = _apply(_linear, torch.empty(0, 3, dtype=torch.int32), torch.ones(3, dtype=torch.int32))
    assert empty.shape == (0, 3) and empty.dtype == torch.int32


def test_a_changed_global_is_read_again(no_tricomb_kernels):
    from scripts import jit_laws
    a, b = torch.tensor([1.0, 5.0]), torch.tensor([1.0, 1.0])
    try:
        assert _apply(jit_laws.capped_add, a, b).tolist() == [2.0, 6.0]
        jit_laws.CAP = 3.0
        assert _apply(jit_laws.capped_add, a, b).tolist() == [2.0, 3.0]
    finally:
        jit_laws.CAP = float("inf")


def test_the_oracle_matches_the_compiled_pipeline(device):
    x, y = torch.randn(257, device=device), torch.randn(257, device=device)
    torch.testing.assert_close(tc.zip_with(_outer)(x, y), _apply(_outer, x, y))


@triton.jit
def _twice_halved(x):
    return (x * 2) >> 1


@triton.jit
def _mix(x):
    h = x * 0x45D9F3B
    return h ^ (h >> 16)


@pytest.mark.parametrize("fn, dtype, values", [
    (_twice_halved, torch.int8, [1, 100, 120, 127, -100]),
    (_twice_halved, torch.int16, [256, 25600, 30720, 32512, -30000]),
    (_mix, torch.int32, [1000 * k for k in range(1, 9)]),
])
def test_integer_arguments_are_computed_in_their_own_dtype(fn, dtype, values, device):
    """Integers reach a user function in their own dtype, as Triton computes on them (an int8 product wraps in
    int8, an int32 one in int32), in the kernel and in the oracle alike."""
    x = torch.tensor(values, dtype=dtype, device=device)
    if fn is _twice_halved:
        want = torch.bitwise_right_shift(x * 2, 1)
    else:
        h = x * 0x45D9F3B
        want = h ^ torch.bitwise_right_shift(h, 16)
    assert torch.equal(_apply(fn, x), want)
    assert torch.equal(tc.map(fn)(x), want)


@triton.jit
def _abs_by_bits(x):
    return (x.to(tl.int32, bitcast=True) & 0x7FFFFFFF).to(tl.float32, bitcast=True)


def test_a_function_the_reference_cannot_run_says_why(no_tricomb_kernels):
    """The reference computes floats in float64; a function that bitcasts float32 bits cannot run there, and says
    so as a tricomb error naming the function (never Triton's own error)."""
    with pytest.raises(tc.UnsupportedError, match="could not run the @triton.jit function '_abs_by_bits' on float64"):
        _apply(_abs_by_bits, torch.randn(5, dtype=torch.float64))
