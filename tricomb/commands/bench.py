"""``tricomb bench``: one pipeline against torch eager and torch.compile on the GPU, as BENCH.md measures.

Every implementation's result is checked against torch first; then each is timed with Triton's ``do_bench``
(median of CUDA-event timings after a warm-up), in the same process. GB/s counts unique bytes: each distinct
input read once and the result written once.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Row:
    name: str
    ms: float
    gbps: float
    matches: bool


def _bytes(inputs, result) -> int:
    results = result if isinstance(result, tuple) else (result,)
    unique = {t.data_ptr(): t for t in inputs}.values()
    return sum(t.numel() * t.element_size() for t in list(unique) + list(results))


def bench(pipe, inputs: list[torch.Tensor]) -> list[Row]:
    """Time ``pipe`` on ``inputs`` (CUDA tensors) against torch eager and torch.compile evaluating the same
    pipeline. Returns one :class:`Row` per implementation, tricomb first."""
    import triton.testing
    from ..pipeline.evaluate import evaluate
    from ..testing import assert_matches_torch

    def eager(*xs):
        return evaluate(pipe.ir, list(xs))

    compiled = torch.compile(eager)
    rows = []
    for name, fn in [("tricomb", pipe), ("torch eager", eager), ("torch.compile", compiled)]:
        result = fn(*inputs)
        try:
            assert_matches_torch(pipe, *inputs, result=result, check_layout=False)
            matches = True
        except AssertionError:
            matches = False
        ms = triton.testing.do_bench(lambda: fn(*inputs), return_mode="median")
        rows.append(Row(name, ms, _bytes(inputs, result) / ms / 1e6, matches))
    return rows
