"""The four discrepancies of issue 18, timed on one GPU in one process, with the variants that tell their causes
apart. Each variant is checked against torch (or against the first variant) before it is timed.

    python bench/experiments/discrepancies.py [--only recurrence drawdown columns logsumexp]

* recurrence: h[t] = d[t] h[t-1] + v[t] over 2**26 pairs (P10's size) and along rows (P9's): the library's
  (value, decay) order, the (decay, value) order written by hand without an identity (the flag totalize adds),
  and with identity=(1.0, 0.0).
* drawdown: P11 (2**28 float32, the prices passed twice), the prices passed as two distinct tensors, a
  cummax alone, a scan then reduce of one input, and a sum (the read ceiling R).
* columns: L2 (sum(axis=0) of a 2**14-square float32 matrix) under the heuristic and other tiles, and torch.
* logsumexp: P8 (32768 x 8192 float32) with the library's declared step, with the user's own combine, and torch.

Times are do_bench medians (ms); GB/s count unique bytes; C is a device-to-device copy, R a sum.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tricomb as tc  # noqa: E402
from tricomb.testing import schedule_overrides  # noqa: E402


def ms(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def close(got, want, rtol=2e-3) -> bool:
    got, want = got.double(), want.double()
    scale = want.abs().max().item() if want.numel() else 0.0
    return got.shape == want.shape and bool(((got - want).abs() <= rtol * (want.abs() + 1e-3 * scale + 1e-6)).all())


def report(title, rows, nbytes, C):
    print(f"\n{title}")
    for name, fn, want in rows:
        try:
            out = fn()
            ok = "ok" if want is None or close(out, want) else "WRONG"
            t = ms(fn)
            print(f"  {name:58s} {t:8.3f} ms {nbytes / t / 1e6:7.0f} GB/s {nbytes / t / 1e6 / C:5.2f} C  {ok}")
        except Exception as exc:  # a variant that fails is reported, not fatal
            print(f"  {name:58s} FAILED {type(exc).__name__}: {str(exc)[:200]}")


def recurrence(C):
    lib = tc.library.linear_recurrence() >> tc.map(lambda h, decays: h)
    dv = tc.zip_with(lambda v, d: (d, v))
    vd = tc.zip_with(lambda v, d: (v, d))
    keep_b, keep_a = tc.map(lambda a, b: b), tc.map(lambda a, b: a)
    pipes = {"(d, v) by hand, no identity (flagged)":
             dv >> tc.scan(lambda a1, b1, a2, b2: (a1 * a2, a2 * b1 + b2)) >> keep_b,
             "(d, v) by hand, identity=(1, 0)":
             dv >> tc.scan(lambda a1, b1, a2, b2: (a1 * a2, a2 * b1 + b2), identity=(1.0, 0.0)) >> keep_b,
             "(v, d) by hand, no identity (flagged)":
             vd >> tc.scan(lambda h1, d1, h2, d2: (d2 * h1 + h2, d1 * d2)) >> keep_a,
             "(v, d) by hand, identity=(0, 1)":
             vd >> tc.scan(lambda h1, d1, h2, d2: (d2 * h1 + h2, d1 * d2), identity=(0.0, 1.0)) >> keep_a}
    for shape in ((1 << 26,), (4096, 16384)):
        v, d = torch.randn(shape, device="cuda"), torch.rand(shape, device="cuda")
        want = lib(v, d)
        rows = [("library (v, d), declared identity (0, 1)", lambda: lib(v, d), None)]
        rows += [(name, lambda p=p: p(v, d), want) for name, p in pipes.items()]
        report(f"recurrence {shape}", rows, 3 * v.numel() * 4, C)
        for name, p in pipes.items():
            plan = str(p.explain(v, d)).splitlines()
            print(f"    {name}: " + " / ".join(line.strip() for line in plan if "scan" in line)[:300])


def drawdown(C):
    n = 1 << 28
    x = torch.randn(n, device="cuda")
    y = x.clone()
    pipe = tc.scan(tc.maximum) >> tc.zip_with(tc.sub) >> tc.max()
    scan_max = tc.scan(tc.maximum) >> tc.max()
    shifted = tc.scan(tc.maximum) >> tc.map(lambda m: m - 1.0) >> tc.max()
    cummax, cumsum, total = tc.scan(tc.maximum), tc.scan(tc.add), tc.sum()
    add_then_max = tc.scan(tc.add) >> tc.max()
    want = (torch.cummax(x, 0).values - x).max()
    rows = [("P11: scan maximum | zip_with sub | max, (x, x)", lambda: pipe(x, x), want),
            ("the same, (x, y) distinct tensors", lambda: pipe(x, y), want),
            ("scan maximum | max, (x)", lambda: scan_max(x), x.max()),
            ("scan maximum | map (m -> m - 1) | max", lambda: shifted(x), x.max() - 1),
            ("scan add | max, (x)", lambda: add_then_max(x), torch.cumsum(x, 0).max()),
            ("sum (the read ceiling R)", lambda: total(x), None)]
    report("drawdown, 2**28 float32 (bytes: x once)", rows, n * 4, C)
    rows = [("scan maximum, stored", lambda: cummax(x), torch.cummax(x, 0).values),
            ("scan add, stored (P4 without the exp)", lambda: cumsum(x), None)]
    report("scans stored (bytes: x + output)", rows, 2 * n * 4, C)
    for o in ({"BLOCK_K": 8192}, {"BLOCK_K": 16384}, {"BLOCK_K": 4096}, {"WINDOW": 32}, {"num_warps": 8}):
        with schedule_overrides(LOOKBACK=True, **o):
            report(f"P11 with {o}", [("(x, x)", lambda: pipe(x, x), want),
                                     ("scan maximum, stored", lambda: cummax(x), None)], n * 4, C)


def columns(C):
    side = 1 << 14
    x = torch.randn(side, side, device="cuda")
    want = torch.sum(x, 0)
    pipe = tc.sum(axis=0)
    rows = [("tricomb heuristic (autotuned)", lambda: pipe(x), want), ("torch.sum(x, 0)", lambda: torch.sum(x, 0), None)]
    report("L2 columns (bytes: x + out)", rows, x.numel() * 4 + side * 4, C)
    for o in ({"BLOCK_M": 64, "BLOCK_K": 64, "num_warps": 8}, {"BLOCK_M": 128, "BLOCK_K": 32, "num_warps": 4},
              {"BLOCK_M": 256, "BLOCK_K": 16, "num_warps": 4}, {"BLOCK_M": 512, "BLOCK_K": 8, "num_warps": 4},
              {"BLOCK_M": 256, "BLOCK_K": 32, "num_warps": 4}, {"BLOCK_M": 128, "BLOCK_K": 64, "num_warps": 4},
              {"BLOCK_M": 256, "BLOCK_K": 16, "SPLIT": 8, "num_warps": 4},
              {"BLOCK_M": 256, "BLOCK_K": 16, "SPLIT": 16, "num_warps": 4},
              {"BLOCK_M": 128, "BLOCK_K": 32, "SPLIT": 8, "num_warps": 4},
              {"BLOCK_M": 512, "BLOCK_K": 16, "SPLIT": 16, "num_warps": 8}):
        with schedule_overrides(**o):
            report(f"tiles {o}", [("tricomb", lambda: pipe(x), want)], x.numel() * 4 + side * 4, C)


def logsumexp(C):
    x = torch.randn(32768, 8192, device="cuda")
    want = torch.logsumexp(x, -1)

    def step(m1, s1, m2, s2):
        m = tc.maximum(m1, m2)
        return m, tc.where(m1 == m, s1, s1 * tc.exp(m1 - m)) + tc.where(m2 == m, s2, s2 * tc.exp(m2 - m))
    user = (tc.map(lambda v: (v, tc.where(v == v, 1.0, v))) >> tc.reduce(step, axis=-1, identity=(-float("inf"), 0.0))
            >> tc.map(lambda m, s: m + tc.log(s)))
    library = tc.library.logsumexp(axis=-1)
    rows = [("library logsumexp (declared share)", lambda: library(x), want),
            ("user combine over (v, 1.0)", lambda: user(x), want),
            ("torch.logsumexp", lambda: torch.logsumexp(x, -1), None)]
    report("P8 logsumexp (bytes: x + out)", rows, x.numel() * 4 + 32768 * 4, C)


def ceilings() -> tuple[float, float]:
    """C (a device-to-device copy, bytes read and written) and R (a sum, bytes read), in GB/s."""
    x = torch.randn(1 << 28, device="cuda")
    y = torch.empty_like(x)
    return 2 * x.numel() * 4 / ms(lambda: y.copy_(x)) / 1e6, x.numel() * 4 / ms(lambda: torch.sum(x)) / 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", default=["recurrence", "drawdown", "columns", "logsumexp"])
    args = parser.parse_args()
    C, R = ceilings()
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}; "
          f"C {C:.0f} GB/s, R {R:.0f} GB/s")
    for name in args.only:
        globals()[name](C)


if __name__ == "__main__":
    main()
