"""Tile and warps for P8 (logsumexp along rows of 32768 x 8192 float32) with the max-first tile fold (each
tile: its max, then the sum of exp(x - max)), checked against torch and timed with do_bench (median), against
torch.compile in the same process. GB/s counts the input read once."""
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tricomb as tc  # noqa: E402
from tricomb.testing import schedule_overrides  # noqa: E402


def ms(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def main():
    x = torch.randn(32768, 8192, device="cuda")
    nbytes = x.numel() * 4
    want = torch.logsumexp(x, -1)
    compiled = torch.compile(lambda v: torch.logsumexp(v, -1))
    compiled(x)
    base = ms(lambda: compiled(x))
    print(f"P8 torch.compile: {base:.4f} ms {nbytes / base / 1e6:.0f} GB/s", flush=True)
    pipe = tc.library.logsumexp(axis=-1)
    configs = [{}] + [{"BLOCK_M": 1, "BLOCK_K": k, "num_warps": w}
                      for k in (2048, 4096, 8192) for w in (4, 8, 16)]
    configs += [{"BLOCK_M": 2, "BLOCK_K": 4096, "num_warps": 8}, {"BLOCK_M": 4, "BLOCK_K": 2048, "num_warps": 8}]
    for cfg in configs:
        with schedule_overrides(**cfg):
            err = ((pipe(x) - want).abs().max() / want.abs().max()).item()
            t = ms(lambda: pipe(x))
        print(f"P8 {cfg or 'tuned'}: {t:.4f} ms {nbytes / t / 1e6:.0f} GB/s {base / t:.2f}x compile "
              f"rel.err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
