"""The norms' forward and backward apart (G2 RMSNorm bf16 65536 x 8192, G3 LayerNorm f32 32768 x 8192): tricomb's
and Liger-Kernel's forward alone and backward alone (tricomb's: one attach kernel with the weight's and bias's
gradients summed over the rows) under the autotuner, in milliseconds by ``do_bench``; then tricomb's backward
kernel alone under the heuristic's schedule, with its terms stored instead of summed, and over several program
counts, warps and row tiles in flight (``ROW_STAGES``: 1 is no software pipelining of the loop over the row
tiles).

    python bench/experiments/norm_backward.py
"""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tricomb as tc  # noqa: E402
from tricomb.runtime import operator  # noqa: E402
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


def _kernel_ms(ir, tensors, **overrides) -> float:
    """The backward kernel alone, launched in this thread (autograd's engine runs a CUDA backward on its own
    thread, which the overrides' context does not reach)."""
    with schedule_overrides(**overrides):
        operator.run_fields(ir, tensors)
        return do_bench(lambda: operator.run_fields(ir, tensors), warmup=10, rep=100)


def main() -> None:
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    for name, (ours, liger, inputs) in _cases().items():
        cotangent = torch.randn_like(ours(*inputs))
        print(f"{name} Liger forward, backward ms: {_times(liger, inputs, cotangent)}", flush=True)
        print(f"{name} tricomb forward, backward ms: {_times(ours, inputs, cotangent)}", flush=True)
        os.environ["TRICOMB_AUTOTUNE"] = "0"
        ((ir, tensors),) = operator.backward_kernels(ours.ir, inputs)
        tensors = [torch.randn_like(t) if t.is_floating_point() else t for t in tensors]
        print(f"{name} backward kernel, heuristic: {_kernel_ms(ir, tensors):.3f} ms", flush=True)
        stored = dataclasses.replace(ir, column_sums=())
        print(f"{name} backward kernel, terms stored: {_kernel_ms(stored, tensors):.3f} ms", flush=True)
        for stages in (1, 2, 3):
            for programs in (num_sms, 2 * num_sms):
                for warps in (8, 16):
                    ms = _kernel_ms(ir, tensors, PROGRAMS=programs, num_warps=warps, ROW_STAGES=stages)
                    print(f"{name} backward kernel, ROW_STAGES={stages} PROGRAMS={programs} num_warps={warps}: "
                          f"{ms:.3f} ms", flush=True)
        del os.environ["TRICOMB_AUTOTUNE"]
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
