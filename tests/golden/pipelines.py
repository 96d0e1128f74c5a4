"""The golden pipelines: a handful of representative pipelines whose emitted modules are committed beside this
file (``<name>.py.txt``), so that a change to code generation shows up in review as a diff of kernel text.

Refresh them after an intended change with ``python tests/golden/refresh.py`` and read the diff.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

import tricomb as tc


@triton.jit
def _leaky(x):
    return tl.where(x > 0, x, x * 0.01)


def _cases():
    """name -> (pipeline, inputs). Inputs are CPU tensors: the text does not depend on the device except for one
    line of the module's docstring."""
    f32 = torch.ones(64, 128)
    pairs = (torch.ones(4096), torch.ones(4096))
    return {
        "map_exp": (tc.map(tc.exp), (torch.ones(1000),)),
        "zip_broadcast_strided": (tc.zip_with(tc.mul), (torch.ones(8, 16).t(), torch.ones(16, 1))),
        "softplus_sum": (tc.parse("map softplus | sum"), (f32,)),
        "row_max_keepdim": (tc.reduce(tc.maximum, axis=1, keepdim=True), (f32,)),
        "column_sum": (tc.reduce(tc.add, axis=0), (f32,)),
        "argmax_rows": (tc.parse("argmax(axis=1)"), (f32,)),
        "nanmean": (tc.parse("nanmean"), (f32,)),
        "mean_half_rows": (tc.parse("mean(axis=1)"), (f32.half(),)),
        "sum_int8_dtype": (tc.parse("sum(axis=1, dtype=int8)"), (f32.int(),)),
        "logsumexp": (tc.parse("logsumexp(axis=1)"), (f32,)),
        "cumsum": (tc.parse("cumsum"), (torch.ones(1 << 16),)),
        "cummax_reverse": (tc.parse("cummax(reverse=True)"), (f32,)),
        "linear_recurrence": (tc.library.linear_recurrence(), pairs),
        "drawdown": (tc.parse("scan maximum | zip_with sub | max"), (torch.ones(4096), torch.ones(4096))),
        "user_jit_map": (tc.map(_leaky) >> tc.reduce(tc.add), (f32,)),
        "runtime_scalars_sgd": (tc.zip_with(lambda p, g, lr, wd: p - lr * (g + wd * p)), (*pairs, 0.01, 1e-4)),
        "first_no_identity": (tc.reduce(lambda a, b: a, axis=1), (f32,)),
        "softmax_two_pass": (tc.parse("attach max(axis=-1) | map (v, m) -> exp(v - m) | attach sum(axis=-1) | "
                                      "map (e, s) -> e / s"), (f32,)),
        "softmax": (tc.library.softmax(), (f32,)),
        "rms_norm_half": (tc.library.rms_norm(), (f32.half(), torch.ones(128).half())),
        "cross_entropy_bf16": (tc.library.cross_entropy(reduction="none"),
                               (f32.bfloat16(), torch.zeros(f32.shape[0], 1, dtype=torch.int64))),
        # the backward module: dx with the weight's and the bias's gradients summed over the rows, one kernel
        "layer_norm_backward": (tc.library.layer_norm(), (torch.ones(64, 128, requires_grad=True),
                                                          torch.ones(128, requires_grad=True),
                                                          torch.ones(128, requires_grad=True))),
    }


CASES = _cases()


def emitted(name: str) -> str:
    """The module text of case ``name``: its backward modules where an input requires grad."""
    pipe, inputs = CASES[name]
    return pipe.source(*inputs, backward=any(getattr(t, "requires_grad", False) for t in inputs))
