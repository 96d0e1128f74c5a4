"""Globals equal as numbers to those of jit_numbers_b.py, but not as values (tests/test_jit_inline.py)."""
import triton

Z = 0.0
ONE = 1


@triton.jit
def reciprocal_of_zero(x):
    return 1.0 / (x * Z)


@triton.jit
def times_one(x):
    return x * ONE


def times(ONE):
    """A @triton.jit function reading the closure cell ONE."""
    @triton.jit
    def times_cell(x):
        return x * ONE
    return times_cell
