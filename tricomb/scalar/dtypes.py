"""Which dtype a value is computed in inside a kernel, for each torch dtype (the numerics rule of DESIGN.md).

float16 and bfloat16 are computed (and accumulated) in float32 and stored in their own dtype; float64 stays
float64; every integer type is computed in int64, so no intermediate wraps where torch's would not; bool
stays bool (Triton's int1).
"""
from __future__ import annotations

import torch


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a value of torch dtype ``dtype`` is computed in inside a kernel."""
    if dtype in (torch.float16, torch.bfloat16, torch.float32):
        return torch.float32
    if dtype == torch.float64 or dtype == torch.bool:
        return dtype
    return torch.int64
