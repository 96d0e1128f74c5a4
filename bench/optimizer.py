"""Optimizer steps (BENCH.md, O1 and O2): AdamW in place over lists of parameters, for tricomb
(``tc.library.adamw_step``, one ``tc.foreach`` launch per dtype group) and ``torch.optim.AdamW`` with
``fused=True``, ``foreach=True`` and the single-tensor loop, in one process.

O1: 200 float32 tensors of mixed sizes (log-uniform, seeded), about 1e9 elements in all. GB/s counts 7 x 4 bytes an
element (p, g, m and v read; p, m and v written); each contender first runs 10 steps from the same parameters and
gradients, and its parameters are compared with fused AdamW's (max relative difference). O2: 1000 tensors of 64
elements: the wall time of a step in a loop of steps with no sync between them (the host's time a step, since
the GPU's work is a few microseconds), and the host's CPU time a step.

    python bench/optimizer.py --out bench/results --commit SHA
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tricomb as tc  # noqa: E402
from common import write_results  # noqa: E402 (bench/, the script's folder)

HYPER = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)


def _sizes(count: int, total: int, seed: int = 0) -> list[int]:
    """``count`` sizes, log-uniform between 1e3 and 1e8, scaled to about ``total`` in all."""
    rng = random.Random(seed)
    raw = [math.exp(rng.uniform(math.log(1e3), math.log(1e8))) for _ in range(count)]
    scale = total / sum(raw)
    return [max(1, int(r * scale)) for r in raw]


class _Tricomb:
    """tricomb's AdamW over the parameters' lists, keeping its own moments and step count."""

    def __init__(self, params, grads):
        self.params, self.grads = params, grads
        self.exp_avgs = [torch.zeros_like(p) for p in params]
        self.exp_avg_sqs = [torch.zeros_like(p) for p in params]
        self.count = 0

    def step(self):
        self.count += 1
        beta1, beta2 = HYPER["betas"]
        tc.library.adamw_step(self.params, self.grads, self.exp_avgs, self.exp_avg_sqs, lr=HYPER["lr"], beta1=beta1,
                              beta2=beta2, eps=HYPER["eps"], weight_decay=HYPER["weight_decay"], step=self.count)


def _steps(step, count: int) -> None:
    with torch.no_grad():
        for _ in range(count):
            step()


def o1(count: int = 200, total: int = 10**9) -> dict:
    sizes = _sizes(count, total)
    initial = [torch.randn(n, device="cuda") for n in sizes]
    grads = [torch.randn(n, device="cuda") * 1e-2 for n in sizes]
    elements = sum(sizes)
    results = {"case": "O1", "tensors": count, "elements": elements, "ms": {}, "GB/s": {}, "max rel diff vs fused": {}}
    reference = None
    for name in ["torch fused", "tricomb", "torch foreach", "torch loop"]:
        params, step = _one(name, initial, grads)
        _steps(step, 10)
        torch.cuda.synchronize()
        if reference is None:
            reference = [p.detach().clone() for p in params]
        else:
            diff = max(((p.detach() - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()
                       for p, r in zip(params, reference))
            results["max rel diff vs fused"][name] = diff
        with torch.no_grad():
            ms = do_bench(step, warmup=5, rep=100 if name != "torch loop" else 30)
        results["ms"][name] = ms
        results["GB/s"][name] = 28 * elements / ms / 1e6
        print(f"O1 {name}: {ms:.3f} ms, {results['GB/s'][name]:.0f} GB/s", file=sys.stderr, flush=True)
        del params, step
        torch.cuda.empty_cache()
    results["tricomb speedup"] = {n: t / results["ms"]["tricomb"] for n, t in results["ms"].items() if n != "tricomb"}
    return results


def _one(name: str, initial: list[torch.Tensor], grads: list[torch.Tensor]):
    """The contender ``name``'s parameters (its own copy of ``initial``) and its step (gradients shared)."""
    if name == "tricomb":
        ours = _Tricomb([p.clone() for p in initial], grads)
        return ours.params, ours.step
    options = {"torch fused": dict(fused=True), "torch foreach": dict(foreach=True), "torch loop": dict(foreach=False)}
    params = [p.clone().requires_grad_() for p in initial]
    for p, g in zip(params, grads):
        p.grad = g
    return params, torch.optim.AdamW(params, **HYPER, **options[name]).step


def o2(count: int = 1000, size: int = 64, steps: int = 300) -> dict:
    initial = [torch.randn(size, device="cuda") for _ in range(count)]
    grads = [torch.randn(size, device="cuda") * 1e-2 for _ in range(count)]
    results = {"case": "O2", "tensors": count, "elements each": size, "wall ms a step": {}, "host CPU ms a step": {}}
    for name in ["torch fused", "tricomb", "torch foreach", "torch loop"]:
        params, step = _one(name, initial, grads)
        _steps(step, 20)
        torch.cuda.synchronize()
        runs = steps if name != "torch loop" else steps // 10
        wall, cpu = time.perf_counter(), time.process_time()
        _steps(step, runs)
        torch.cuda.synchronize()
        wall, cpu = (time.perf_counter() - wall) / runs * 1e3, (time.process_time() - cpu) / runs * 1e3
        results["wall ms a step"][name], results["host CPU ms a step"][name] = wall, cpu
        print(f"O2 {name}: {wall:.3f} ms wall, {cpu:.3f} ms CPU a step", file=sys.stderr, flush=True)
    fused = results["wall ms a step"]["torch fused"]
    results["tricomb / fused (wall)"] = results["wall ms a step"]["tricomb"] / fused
    return results


def markdown(o1r: dict, o2r: dict, meta: dict) -> str:
    lines = [f"# Optimizer steps on {meta['gpu']} (commit {meta['commit']}, torch {meta['torch']}, "
             f"triton {meta['triton']})", "",
             f"O1: AdamW in place, {o1r['tensors']} float32 tensors, {o1r['elements']:,} elements; GB/s over 28 bytes "
             "an element; speedup = contender's time / tricomb's; parameters after 10 steps against fused AdamW's.",
             "", "| contender | ms | GB/s | tricomb speedup | max rel diff vs fused |", "|---|---|---|---|---|"]
    for name, ms in o1r["ms"].items():
        speed = f"{o1r['tricomb speedup'][name]:.2f}x" if name in o1r["tricomb speedup"] else ""
        diff = f"{o1r['max rel diff vs fused'][name]:.1e}" if name in o1r["max rel diff vs fused"] else ""
        lines.append(f"| {name} | {ms:.3f} | {o1r['GB/s'][name]:.0f} | {speed} | {diff} |")
    lines += ["", f"O2: AdamW over {o2r['tensors']} tensors of {o2r['elements each']} elements: time a step in a "
              "loop of steps (no sync between them), and the host's CPU time a step.", "",
              "| contender | wall ms a step | host CPU ms a step |", "|---|---|---|"]
    for name, wall in o2r["wall ms a step"].items():
        lines.append(f"| {name} | {wall:.3f} | {o2r['host CPU ms a step'][name]:.3f} |")
    lines.append(f"\ntricomb / fused (wall): {o2r['tricomb / fused (wall)']:.2f}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--total", type=int, default=10**9, help="O1's elements in all")
    args = parser.parse_args()
    meta = {"gpu": torch.cuda.get_device_name(), "commit": args.commit, "torch": torch.__version__,
            "triton": triton.__version__}
    o2r = o2()
    o1r = o1(total=args.total)
    write_results(args.out, "optimizer", meta, {"results": [o1r, o2r]}, markdown(o1r, o2r, meta))


if __name__ == "__main__":
    main()
