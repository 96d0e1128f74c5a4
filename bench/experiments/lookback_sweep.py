"""Tile size, warps and look-back window for one-pass scans of one long row (P4's 2^28 float32 cumsum after exp,
P10's recurrence, P11's drawdown), each checked against torch, timed with do_bench (median). GB/s as BENCH.md."""
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tricomb as tc  # noqa: E402
from tricomb.testing import schedule_overrides  # noqa: E402


def ms(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def sweep(name, pipe, inputs, want, nbytes, configs):
    for cfg in configs:
        with schedule_overrides(**cfg):
            got = pipe(*inputs)
            err = ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()
            t = ms(lambda: pipe(*inputs))
        print(f"{name} {cfg}: {t:.3f} ms {nbytes / t / 1e6:.0f} GB/s rel.err {err:.1e}", flush=True)


def main():
    n = 1 << 28
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    copy = ms(lambda: y.copy_(x))
    print(f"copy: {copy:.3f} ms {2 * 4 * n / copy / 1e6:.0f} GB/s")
    print(f"torch.cumsum: {ms(lambda: torch.cumsum(x, 0)):.3f} ms")
    base = {"LOOKBACK": True, "BLOCK_M": 1}
    configs = [{**base, "BLOCK_K": k, "num_warps": w, "WINDOW": 32}
               for k, w in [(2048, 2), (2048, 4), (4096, 2), (4096, 4), (4096, 8), (8192, 4), (8192, 8)]]
    configs += [{**base, "BLOCK_K": 4096, "num_warps": 4, "WINDOW": win} for win in (8, 16, 64)]
    configs += [{}]
    pipe = tc.parse("map exp | cumsum")
    if "P10" not in sys.argv[1:]:
        sweep("P4", pipe, [x], torch.cumsum(torch.exp(x).double(), 0), 8 * n, configs)
    if "P4" in sys.argv[1:]:
        return
    v, d = torch.randn(1 << 26, device="cuda"), torch.rand(1 << 26, device="cuda")
    rec = tc.library.linear_recurrence() >> tc.map(lambda h, decays: h)
    from torch._higher_order_ops.associative_scan import associative_scan
    want = associative_scan(lambda a, b: (a[0] * b[1] + b[0], a[1] * b[1]), (v, d), dim=-1)[0]
    sweep("P10", rec, [v, d], want, 12 * (1 << 26),
          [{}] + [{**base, "BLOCK_K": k, "num_warps": w, "WINDOW": win}
                  for k, w, win in [(512, 1, 32), (512, 2, 32), (1024, 2, 32), (1024, 4, 32), (2048, 2, 32),
                                    (2048, 4, 32), (2048, 4, 16), (2048, 8, 32), (4096, 4, 32), (4096, 8, 32)]])
    if "P10" in sys.argv[1:]:
        return
    running = tc.scan(lambda m1, p1, m2, p2: (tc.maximum(m1, m2), p2))
    dd = tc.map(lambda x: (x, x)) >> running >> tc.map(lambda m, p: m - p) >> tc.max()
    sweep("P11", dd, [x], (torch.cummax(x, 0).values - x).max(), 4 * n,
          [{}, {**base, "BLOCK_K": 2048, "num_warps": 4}, {**base, "BLOCK_K": 4096, "num_warps": 8},
           {**base, "BLOCK_K": 8192, "num_warps": 8}])


if __name__ == "__main__":
    main()
