"""The norms' forward and backward apart (G2 RMSNorm bf16 65536 x 8192, G3 LayerNorm f32 32768 x 8192): tricomb's
forward alone, its backward alone (one attach kernel with the weight's and bias's gradients summed over the rows)
under the autotuner and under the heuristic's schedule with several program counts and warps, and Liger-Kernel's
forward and backward alone, in milliseconds by ``do_bench``.

    python bench/experiments/norm_backward.py
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tricomb as tc  # noqa: E402
from tricomb.testing import schedule_overrides  # noqa: E402


def _cases():
    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=True)
    from liger_kernel.ops import layer_norm, rms_norm
    return {
        "G2": (tc.library.rms_norm(eps=1e-6), lambda x, w: rms_norm.LigerRMSNormFunction.apply(x, w, 1e-6),
               [randn(65536, 8192, dtype=torch.bfloat16), randn(8192, dtype=torch.bfloat16)]),
        "G3": (tc.library.layer_norm(eps=1e-5), lambda x, w, b: layer_norm.LigerLayerNormFunction.apply(x, w, b, 1e-5),
               [randn(32768, 8192), randn(8192), randn(8192)]),
    }


def _times(fn, inputs, cotangent) -> tuple[float, float]:
    out = fn(*inputs)
    forward = do_bench(lambda: fn(*inputs), warmup=10, rep=100)
    backward = do_bench(lambda: torch.autograd.grad(out, inputs, cotangent, retain_graph=True), warmup=10, rep=100)
    return forward, backward


def main() -> None:
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    for name, (ours, liger, inputs) in _cases().items():
        cotangent = torch.randn_like(ours(*inputs))
        print(f"{name} Liger forward, backward ms: {_times(liger, inputs, cotangent)}", flush=True)
        print(f"{name} tricomb tuned forward, backward ms: {_times(ours, inputs, cotangent)}", flush=True)
        os.environ["TRICOMB_AUTOTUNE"] = "0"
        print(f"{name} tricomb heuristic forward, backward ms: {_times(ours, inputs, cotangent)}", flush=True)
        for programs in (num_sms, 2 * num_sms, 4 * num_sms):
            for warps in (8, 16, 32):
                with schedule_overrides(PROGRAMS=programs, num_warps=warps):
                    print(f"{name} tricomb PROGRAMS={programs} num_warps={warps} forward, backward ms: "
                          f"{_times(ours, inputs, cotangent)}", flush=True)
        del os.environ["TRICOMB_AUTOTUNE"]
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
