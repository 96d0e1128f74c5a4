"""Every pipeline is exactly one kernel launch: counted from Triton's own entry points and torch's dispatcher."""
import pytest
import torch
import triton
import triton.language as tl

import tricomb as tc
from tricomb.testing import count_launches, schedule_overrides


@triton.jit
def _jit_softplus(x):
    return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))


PIPELINES = {
    "map builtin": (lambda: tc.map(tc.softplus), [(1000,)]),
    "map jit": (lambda: tc.map(_jit_softplus), [(1000,)]),
    "map jit | sum": (lambda: tc.map(_jit_softplus) >> tc.reduce(tc.add), [(1000,)]),
    "lambda chain": (lambda: tc.map(lambda x: x * 2) >> tc.map(tc.exp) >> tc.map(lambda x: tc.where(x > 1, x, 0.0)),
                     [(7, 9)]),
    "zip_with 3-ary then zip": (lambda: tc.zip_with(lambda a, b, c: a * b + c) >> tc.zip_with(tc.maximum),
                                [(4, 5), (5,), (4, 1), (4, 5)]),
    "sum rows": (lambda: tc.map(tc.softplus) >> tc.sum(axis=-1), [(30, 50)]),
    "sum columns": (lambda: tc.sum(axis=0), [(30, 50)]),
    "sum tuple axes": (lambda: tc.sum(axis=(0, 2)), [(3, 4, 5)]),
    "prod": (lambda: tc.prod(), [(20,)]),
    "max then map": (lambda: tc.max(axis=1) >> tc.map(tc.exp), [(8, 8)]),
    "min keepdim": (lambda: tc.min(axis=0, keepdim=True), [(8, 8)]),
    "mean": (lambda: tc.mean(), [(100,)]),
    "reduce then zip": (lambda: tc.sum(axis=1) >> tc.zip_with(tc.add), [(6, 7), (6,)]),
    "cumsum": (lambda: tc.map(tc.exp) >> tc.cumsum(), [(300,)]),
    "cumprod axis 0": (lambda: tc.cumprod(axis=0), [(5, 4)]),
    "cummax": (lambda: tc.cummax(), [(3, 40)]),
    "cummin then zip": (lambda: tc.cummin(axis=0) >> tc.zip_with(lambda v, i, y: v - y * i), [(9, 3), (9, 3)]),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
@pytest.mark.parametrize("split", [False, True], ids=["heuristic", "split-rows"])
def test_one_launch(name, split, device):
    make, shapes = PIPELINES[name]
    pipe = make()
    inputs = [torch.randn(s, device=device) for s in shapes]
    overrides = {"BLOCK_K": 4, "SPLIT": 4} if split else {}
    with schedule_overrides(**overrides):
        pipe(*inputs)  # first call: emit, load, and (once per device) allocate the ticket counters
        with count_launches() as launches:
            pipe(*inputs)
    assert launches.triton == 1 and launches.torch_ops == [], launches
    assert pipe.explain(*inputs).num_kernels == 1
    assert pipe.source(*inputs).count("\ndef kernel(") == 1


def test_explain_is_readable():
    plan = (tc.map(tc.softplus) >> tc.sum(axis=-1)).explain(torch.randn(4, 8))
    text = str(plan)
    assert text.startswith("1 kernel: reduce") and "map softplus" in text and "kept" in text


def test_emitted_lines_name_their_stage():
    source = (tc.map(tc.exp) >> tc.zip_with(tc.mul) >> tc.sum()).source(torch.randn(4), torch.randn(4))
    assert "# stage 0: map exp" in source and "# stage 1: zip_with mul" in source and "# stage 2: sum" in source
