"""@triton.jit functions whose globals and closure cells tests change between calls (tests/test_jit_inline.py)."""
import triton

from scripts import jit_numbers_a

SCALE = 2.0


@triton.jit
def scaled(x):
    return x * SCALE


@triton.jit
def calls_scaled(x):
    return scaled(x) + 1.0


@triton.jit
def reads_another_module(x):
    return x * jit_numbers_a.ONE


@triton.jit
def plus_one(x):
    return x + 1.0


@triton.jit
def plus_two(x):
    return x + 2.0


STEP = plus_one


@triton.jit
def calls_step(x):
    return STEP(x)


def with_cell(c):
    """A @triton.jit function reading the closure cell c, and the function that sets the cell."""
    @triton.jit
    def times_cell(x):
        return x * c

    def set_cell(value):
        nonlocal c
        c = value
    return times_cell, set_cell
