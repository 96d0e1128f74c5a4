"""G4 apart: the linear recurrence ``h = d * h + v`` along rows of 2 x 4096 x 16384 f32, forward and backward.

Times (milliseconds, ``do_bench``, the autotuner on) the forward alone, the backward alone (autograd, from a kept
graph) and each backward kernel launched alone, with the unique bytes each kernel must move (its inputs read once,
its outputs written once) as GB/s; beside them a copy of one tensor (the ceiling C) and the reverse cumsum of one
tensor (a scan kernel with one input and one output). Then torch's ``associative_scan`` compiled in its
"pointwise" mode, forward and backward, on rows of ``--lengths`` elements, each length in a fresh process that is
stopped after ``--timeout`` seconds: its backward builds a T x T matrix a row (torch/_higher_order_ops/
associative_scan.py, ``compute_y_mat``), so its time grows with the square of the row's length; both
contenders' gradients are compared with a float64 step-by-step recurrence. ``--profile T`` prints torch's
profiler table (host and device) of five forward and backward steps on rows of T elements.

    python bench/experiments/recurrence_backward.py [--lengths 256,1024,4096] [--timeout 120] [--profile T]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tricomb as tc  # noqa: E402
from tricomb.runtime import operator  # noqa: E402

SHAPE = (2, 4096, 16384)


def _ms(fn) -> float:
    fn()
    return do_bench(fn, warmup=25, rep=200)


def _gbps(tensors: int, ms: float) -> float:
    return tensors * 4 * torch.Size(SHAPE).numel() / ms / 1e6


def tricomb_parts() -> None:
    pipe = tc.library.linear_recurrence() >> tc.map(lambda h, decay: h)
    v = torch.randn(*SHAPE, device="cuda", requires_grad=True)
    d = torch.rand(*SHAPE, device="cuda", requires_grad=True)
    copy_src, copy_dst = torch.randn(*SHAPE, device="cuda"), torch.empty(*SHAPE, device="cuda")
    ceiling = _ms(lambda: copy_dst.copy_(copy_src))
    print(f"copy of one tensor: {ceiling:.3f} ms, C = {_gbps(2, ceiling):.0f} GB/s", flush=True)
    reverse = tc.cumsum(axis=-1, reverse=True)
    ms = _ms(lambda: reverse(copy_src))
    print(f"reverse cumsum of one tensor: {ms:.3f} ms, {_gbps(2, ms):.0f} GB/s", flush=True)
    h = pipe(v, d)
    dh = torch.randn_like(h)
    forward = _ms(lambda: pipe(v, d))
    print(f"forward: {forward:.3f} ms, {_gbps(3, forward):.0f} GB/s over v, d, h", flush=True)
    backward = _ms(lambda: torch.autograd.grad(h, (v, d), dh, retain_graph=True))
    print(f"backward (autograd): {backward:.3f} ms, {_gbps(4, backward):.0f} GB/s over dh, d, dv, dd "
          f"(the fewest: dh and d read, dv and dd written; h read back counts a fifth)", flush=True)
    total = _ms(lambda: torch.autograd.grad(pipe(v, d), (v, d), dh))
    print(f"forward+backward: {total:.3f} ms, {_gbps(6, total):.0f} GB/s over six tensors "
          f"({_gbps(6, total) / _gbps(2, ceiling):.2f} C)", flush=True)
    for n, (ir, tensors) in enumerate(operator.backward_kernels(pipe.ir, (v, d)), 1):
        unique = len({t.data_ptr() for t in tensors})  # (a backward kernel takes its tensors again after the scan)
        tensors = tuple(torch.randn_like(t) for t in tensors)
        outs = operator.run_fields(ir, tensors)
        unique += len(outs)
        ms = _ms(lambda: operator.run_fields(ir, tensors))
        print(f"backward kernel {n} ({len(tensors)} arguments, {unique} tensors read or written, an argument it "
              f"reads nothing of counted too): {ms:.3f} ms, "
              f"{_gbps(unique, ms):.0f} GB/s", flush=True)
        print(f"  {ir}", flush=True)


def compiled(length: int) -> None:
    """One length of torch.compile's associative_scan, forward and backward, in this process."""
    from torch._higher_order_ops.associative_scan import associative_scan

    def combine(earlier, later):
        return later[0] + later[1] * earlier[0], earlier[1] * later[1]

    def recurrence(v, d):
        return associative_scan(combine, (v, d), dim=-1, combine_mode="pointwise")[0]

    shape = (*SHAPE[:2], length)
    v = torch.randn(*shape, device="cuda", requires_grad=True)
    d = torch.rand(*shape, device="cuda", requires_grad=True)
    dh = torch.randn(*shape, device="cuda")
    fn = torch.compile(recurrence)
    pipe = tc.library.linear_recurrence() >> tc.map(lambda h, decay: h)
    start = time.perf_counter()
    theirs = torch.autograd.grad(fn(v, d), (v, d), dh)
    first = time.perf_counter() - start
    ours = torch.autograd.grad(pipe(v, d), (v, d), dh)
    same = all(torch.allclose(a, b, rtol=1e-3, atol=1e-3 * b.abs().max().item()) for a, b in zip(ours, theirs))
    exact = torch.autograd.grad(_sequential(v.double(), d.double()), (v, d), dh.double())
    error = [max(((a.double() - e).norm() / e.norm()).item() for a, e in zip(g, exact)) for g in (ours, theirs)]
    ms = _ms(lambda: torch.autograd.grad(fn(v, d), (v, d), dh))
    mine = _ms(lambda: torch.autograd.grad(pipe(v, d), (v, d), dh))
    peak = torch.cuda.max_memory_allocated() / 2 ** 30
    print(f"length {length}: torch.compile first call {first:.1f} s, {ms:.3f} ms a step (peak {peak:.1f} GiB); "
          f"tricomb {mine:.3f} ms; tricomb {ms / mine:.1f}x faster; gradients agree: {same}; relative error "
          f"against float64: tricomb {error[0]:.1e}, torch.compile {error[1]:.1e}", flush=True)


def _sequential(v, d):
    """The recurrence step by step (the float64 reference)."""
    h, out = torch.zeros_like(v[..., 0]), []
    for t in range(v.shape[-1]):
        h = d[..., t] * h + v[..., t]
        out.append(h)
    return torch.stack(out, -1)


def host_profile(length: int) -> None:
    """Where a forward and backward on rows of ``length`` spends its time: torch's profiler (host and device)."""
    from torch.profiler import ProfilerActivity, profile
    pipe = tc.library.linear_recurrence() >> tc.map(lambda h, decay: h)
    shape = (*SHAPE[:2], length)
    v = torch.randn(*shape, device="cuda", requires_grad=True)
    d = torch.rand(*shape, device="cuda", requires_grad=True)
    dh = torch.randn(*shape, device="cuda")
    for _ in range(3):
        torch.autograd.grad(pipe(v, d), (v, d), dh)
    h = pipe(v, d)
    print(f"length {length}: forward with grad {_ms(lambda: pipe(v, d)):.3f} ms, without "
          f"{_ms(lambda: pipe(v.detach(), d.detach())):.3f} ms, backward alone "
          f"{_ms(lambda: torch.autograd.grad(h, (v, d), dh, retain_graph=True)):.3f} ms", flush=True)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            torch.autograd.grad(pipe(v, d), (v, d), dh)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=30), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="256,1024,4096")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--compiled", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile", type=int, help="profile one forward and backward on rows of this length")
    args = parser.parse_args()
    if args.profile:
        return host_profile(args.profile)
    if args.compiled:
        return compiled(args.compiled)
    tricomb_parts()
    for length in [int(n) for n in args.lengths.split(",") if n]:
        try:
            subprocess.run([sys.executable, __file__, "--compiled", str(length)], timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            print(f"length {length}: torch.compile did not finish its first forward and backward in "
                  f"{args.timeout:.0f} s", flush=True)


if __name__ == "__main__":
    main()
