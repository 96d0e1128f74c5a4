"""A @triton.jit function made in a closure, capturing a plain number (tests/test_call_path.py)."""
import triton


def make(c):
    @triton.jit
    def scaled(x):
        return x * c
    return scaled
