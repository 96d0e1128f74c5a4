"""A @triton.jit operator whose associativity depends on a global the tests change (tests/test_operators.py)."""
import triton
import triton.language as tl

CAP = float("inf")


@triton.jit
def capped_add(a, b):
    return tl.minimum(a + b, CAP)
