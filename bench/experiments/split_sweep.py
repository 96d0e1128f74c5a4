"""Programs per row (SPLIT), tile and warps for a whole-array reduce: P7's bf16 norm and P2's softplus sum,
2^28 elements, each checked against torch and timed with do_bench (median), against torch.compile."""
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tricomb as tc  # noqa: E402
from tricomb.testing import schedule_overrides  # noqa: E402


def ms(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def main():
    n = 1 << 28
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    norm = torch.compile(lambda v: torch.linalg.vector_norm(v))
    norm(x)
    print(f"P7 torch.compile: {ms(lambda: norm(x)):.4f} ms", flush=True)
    pipe = tc.parse("map square | sum | map sqrt")
    want = torch.linalg.vector_norm(x.float())
    for split in (264, 528, 1056, 2112):
        for block, warps in ((2048, 4), (4096, 4), (4096, 8), (8192, 8)):
            cfg = {"SPLIT": split, "BLOCK_K": block, "num_warps": warps, "BLOCK_M": 1}
            with schedule_overrides(**cfg):
                err = ((pipe(x).float() - want).abs() / want).item()
                t = ms(lambda: pipe(x))
            print(f"P7 {cfg}: {t:.4f} ms rel.err {err:.1e}", flush=True)
    with torch.no_grad():
        print(f"P7 tricomb tuned: {ms(lambda: pipe(x)):.4f} ms", flush=True)


if __name__ == "__main__":
    main()
