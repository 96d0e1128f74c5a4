"""@triton.jit functions whose locals and globals test the inliner's hygiene (tests/test_jit_inline.py)."""
import math

import numpy
import triton
import triton.language as language

K = language.constexpr(2.0)


@triton.jit
def reads_k(x):
    return x * K


@triton.jit
def local_named_like_the_constant(x):
    user_K = reads_k(x) + 1.0  # the name the inliner first gave the constant for K
    return user_K * K


@triton.jit
def local_named_tl(x):
    tl = 3.0  # the emitted module's name for triton.language, which this function calls `language`
    return language.maximum(x, 0.0) * tl


@triton.jit
def library_function_through_an_alias(x):
    return language.sigmoid(x) * 2.0


INF = language.constexpr(float("inf"))
NEG_INF = -math.inf
NAN = float("nan")
QUARTER = numpy.float64(0.25)
THIRD = numpy.float32(1 / 3)
THREE = numpy.int64(3)
YES = numpy.bool_(True)


@triton.jit
def special_numbers(x):
    bounded = language.minimum(language.maximum(x, NEG_INF), INF)
    return language.where(x > 0.0, bounded * QUARTER + x * THIRD * THREE, NAN) * YES


LONG_THIRD = numpy.longdouble(1) / 3


@triton.jit
def reads_a_longdouble(x):
    return x * LONG_THIRD


@triton.jit
def assigns_a_global(x):
    global K
    K = 3.0
    return x * K
