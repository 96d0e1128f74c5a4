"""Globals equal as numbers to those of jit_numbers_a.py, but not as values (tests/test_jit_inline.py)."""
import triton

Z = -0.0
ONE = 1.0


@triton.jit
def reciprocal_of_zero(x):
    return 1.0 / (x * Z)


@triton.jit
def times_one(x):
    return x * ONE


@triton.jit
def times_negative_zero(x):
    return x * -0.0  # (a literal: whether Triton keeps a scalar zero's sign at all)
