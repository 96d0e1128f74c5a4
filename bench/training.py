"""Forward and backward (BENCH.md, "Forward and backward (training)"): G1 softmax, G2 RMSNorm bf16, G3 LayerNorm,
G4 the linear recurrence, G5 cumsum, each timed as one forward and one backward of the inputs' gradients (the
weight's and bias's too for the norms) from a given cotangent, for tricomb, torch eager, torch.compile of the
eager function and Liger-Kernel where it has the op, in one process. GB/s over the tensors BENCH.md counts (five:
x and y forward; y, dy and dx backward; six for G4: v, d and h forward, dh, dv and dd backward), with the same
byte count for every contender; the ratio columns are against tricomb. G4's eager function is torch's
``associative_scan`` over (value, decay) pairs (combine_mode "generic", which runs eagerly). Its compiled form
is not run here: its backward builds a T x T matrix a row (T = 16384: a terabyte for the case), so it never
finishes, and where it does run (rows of 256 and 1024) its gradients are wrong; the reason is recorded in its
place, and bench/experiments/recurrence_backward.py measures it at those lengths. A contender that fails gets
its error recorded instead of a time.

    python bench/training.py --out bench/results --commit SHA [--cases G1,G2]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tricomb as tc  # noqa: E402
from common import write_results  # noqa: E402 (bench/, the script's folder)

F = torch.nn.functional


def _liger():
    try:
        from liger_kernel.ops import layer_norm, rms_norm, softmax
    except ImportError:
        return {}
    return {"G1": lambda x: softmax.LigerSoftmaxFunction.apply(x),
            "G2": lambda x, w: rms_norm.LigerRMSNormFunction.apply(x, w, 1e-6),
            "G3": lambda x, w, b: layer_norm.LigerLayerNormFunction.apply(x, w, b, 1e-5)}


def _combine(earlier, later):
    """(value, decay) pairs composed as affine maps ``h -> d * h + v``: the earlier map applied first."""
    return later[0] + later[1] * earlier[0], earlier[1] * later[1]


def _associative_scan():
    from torch._higher_order_ops.associative_scan import associative_scan

    def recurrence(v, d):
        return associative_scan(_combine, (v, d), dim=-1, combine_mode="generic")[0]
    return recurrence


def _cases() -> dict:
    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, device="cuda", dtype=dtype)
    return {
        "G1": ("softmax fwd+bwd", tc.library.softmax(axis=-1), lambda x: torch.softmax(x, -1),
               lambda: [randn(32768, 8192)]),
        "G2": ("RMSNorm fwd+bwd (dx, dw)", tc.library.rms_norm(eps=1e-6), lambda x, w: F.rms_norm(x, (8192,), w, 1e-6),
               lambda: [randn(65536, 8192, dtype=torch.bfloat16), randn(8192, dtype=torch.bfloat16)]),
        "G3": ("LayerNorm fwd+bwd (dx, dw, db)", tc.library.layer_norm(eps=1e-5),
               lambda x, w, b: F.layer_norm(x, (8192,), w, b, 1e-5),
               lambda: [randn(32768, 8192), randn(8192), randn(8192)]),
        "G4": ("linear recurrence fwd+bwd (dv, dd)", tc.library.linear_recurrence() >> tc.map(lambda h, decay: h),
               _associative_scan(),
               lambda: [randn(2, 4096, 16384), torch.rand(2, 4096, 16384, device="cuda")]),
        "G5": ("cumsum fwd+bwd", tc.cumsum(axis=-1), lambda x: torch.cumsum(x, -1), lambda: [randn(2 ** 28)]),
    }


_TENSORS = {"G4": 6}  # tensors a forward+backward touches, where not five
_NOT_RUN = {("G4", "torch.compile"): "not run: torch.compile of associative_scan builds a T x T matrix a row in "
                                     "its backward (T = 16384), and gives wrong gradients where it runs "
                                     "(bench/experiments/recurrence_backward.py)"}


def _step(fn, inputs, cotangent):
    def step():
        out = fn(*inputs)
        torch.autograd.grad(out, inputs, cotangent)
    return step


def _time(fn, inputs, cotangent) -> float | str:
    """Milliseconds a forward+backward takes, or the error the contender raised."""
    step = _step(fn, inputs, cotangent)
    try:
        step()
    except Exception as exc:  # a peer that cannot run the case is reported, not fatal to the run
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return do_bench(step, warmup=25, rep=200)


def _matches(ours, eager, inputs, cotangent) -> bool | str:
    """Whether tricomb's gradients equal eager's (bf16 tolerance), or why there is no eager reference."""
    try:
        theirs = torch.autograd.grad(eager(*inputs), inputs, cotangent)
    except Exception as exc:  # no reference on this torch: said in the table rather than guessed
        return f"no reference ({type(exc).__name__})"
    return all(torch.allclose(a.float(), b.float(), rtol=5e-2, atol=5e-2 * b.float().abs().max().item())
               for a, b in zip(ours, theirs))


def run_case(name: str, what: str, pipe, eager, make) -> dict:
    inputs = [t.requires_grad_(True) for t in make()]
    cotangent = torch.randn_like(pipe(*inputs))
    x = inputs[0]
    nbytes = _TENSORS.get(name, 5) * x.numel() * x.element_size()
    matches = _matches(torch.autograd.grad(pipe(*inputs), inputs, cotangent), eager, inputs, cotangent)
    print(f"{name} matches: {matches}", file=sys.stderr, flush=True)
    contenders = {"tricomb": pipe, "torch eager": eager, "torch.compile": torch.compile(eager)}
    peer = _liger().get(name)
    if peer is not None:
        contenders["Liger-Kernel"] = peer
    timed = {}
    for who, fn in contenders.items():
        timed[who] = _NOT_RUN.get((name, who)) or _time(fn, inputs, cotangent)
        print(f"{name} {who}: {timed[who]}", file=sys.stderr, flush=True)
    ms = {who: t for who, t in timed.items() if not isinstance(t, str)}
    return {"case": name, "what": what, "shape": list(x.shape), "dtype": str(x.dtype)[6:], "matches": matches,
            "ms": ms, "errors": {who: t for who, t in timed.items() if isinstance(t, str)},
            "GB/s": {who: nbytes / t / 1e6 for who, t in ms.items()},
            "tricomb speedup": {who: t / ms["tricomb"] for who, t in ms.items() if who != "tricomb"}}


def markdown(results: list[dict], meta: dict) -> str:
    lines = [f"# Forward and backward on {meta['gpu']} (commit {meta['commit']}, torch {meta['torch']}, "
             f"triton {meta['triton']})", "",
             "GB/s over x, y, y, dy, dx (G4: v, d, h, dh, dv, dd); speedup = contender's time / tricomb's.", "",
             "| case | what | tricomb GB/s | eager | compile | Liger | vs eager | vs compile | vs Liger | match |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        g, s = r["GB/s"], r["tricomb speedup"]
        cell = lambda d, k: f"{d[k]:.0f}" if k in d else ""  # noqa: E731
        ratio = lambda k: f"{s[k]:.2f}x" if k in s else ""  # noqa: E731
        lines.append(f"| {r['case']} | {r['what']} | {g['tricomb']:.0f} | {cell(g, 'torch eager')} | "
                     f"{cell(g, 'torch.compile')} | {cell(g, 'Liger-Kernel')} | {ratio('torch eager')} | "
                     f"{ratio('torch.compile')} | {ratio('Liger-Kernel')} | {r['matches']} |")
    lines += [f"- {r['case']} {who}: {err}" for r in results for who, err in r["errors"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--cases", default="G1,G2,G3,G4,G5")
    args = parser.parse_args()
    meta = {"gpu": torch.cuda.get_device_name(), "commit": args.commit, "torch": torch.__version__,
            "triton": triton.__version__}
    cases = _cases()
    results = []
    for name in args.cases.split(","):
        results.append(run_case(name, *cases[name]))
        print(json.dumps(results[-1]), flush=True)
        torch.cuda.empty_cache()
    write_results(args.out, "training", meta, {"results": results}, markdown(results, meta))


if __name__ == "__main__":
    main()
