"""Which dtype a value is computed in inside a kernel, for each torch dtype (the numerics rule of DESIGN.md).

float16 and bfloat16 are computed (and accumulated) in float32 and stored in their own dtype; float64 stays
float64; every integer type and bool is computed with its own dtype's semantics (bool as Triton's int1), so
integer arithmetic wraps exactly where torch's does and nowhere else: ``int8 * 2`` wraps in int8 as in torch, and
``int8 + int32`` is computed in int32 because torch's result is int32.

A kernel holds int8, int16 and uint8 values in int32 registers (:func:`held_dtype`), already wrapped into their
own range: loaded, then widened at once, and narrowed only when stored. 16-bit integer arithmetic followed by a
widening is miscompiled on the H200 (triton 3.6): PTX ``neg.s16`` of -32768 then ``cvt.s64.s16`` gives +32768,
and ``abs`` of int16 -32768 compared with -5 was seen true. LLVM narrows int32 arithmetic ending in a
recognisable sign extension (``((x + 2**15) & 0xFFFF) - 2**15``) back to 16 bits, so compiled kernels wrap
with a PTX bit-field extract instead (``bfe``, opaque to LLVM; the helper ``tc_wrap``).
"""
from __future__ import annotations

import math

import torch


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a value of torch dtype ``dtype`` is computed in inside a kernel."""
    if dtype in (torch.float16, torch.bfloat16, torch.float32):
        return torch.float32
    return dtype


def kernel_compute_dtype(dtypes) -> torch.dtype:
    """The float dtype a pipeline's kernel computes in, for inputs of torch dtypes ``dtypes`` (an iterable):
    float64 when any input is float64, else float32 (float16 and bfloat16 are computed in float32)."""
    return torch.float64 if torch.float64 in tuple(dtypes) else torch.float32


def held_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a kernel holds a value of torch dtype ``dtype`` in: its compute dtype, except that int8, int16
    and uint8 are held in int32 (the module docstring says why)."""
    return torch.int32 if dtype in NARROW_INTEGERS else compute_dtype(dtype)


NARROW_INTEGERS = (torch.int8, torch.int16, torch.uint8)


def typed_identity(value: float, dtype: torch.dtype):
    """An operator's identity (a float, possibly infinite) as a value of ``dtype``: -inf is an integer dtype's
    smallest value and +inf its largest; for bool, -inf is False and +inf True."""
    if dtype.is_floating_point:
        return value
    if dtype == torch.bool:
        return bool(value > 0) if math.isinf(value) else bool(value)
    info = torch.iinfo(dtype)
    return info.max if value == math.inf else info.min if value == -math.inf else int(value)
