"""What linking libdevice without flush-to-zero costs: tricomb's kernels for the builtins whose libdevice code
reads the switch, timed with ``do_bench``. Run it once as committed and once with ``_compile_options`` in
``tricomb/codegen/host.py`` returning ``enable_reflect_ftz=True``, on the same machine.

    python bench/experiments/ftz_cost.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tricomb as tc  # noqa: E402

N = 1 << 28


def main() -> None:
    x = torch.randn(N, device="cuda")
    rows = torch.randn(32768, 8192, device="cuda")
    w, b = torch.randn(8192, device="cuda"), torch.randn(8192, device="cuda")
    cases = {
        "map softplus": (tc.map(tc.softplus), (x,)),
        "map sqrt | map sin | map erf": (tc.parse("map abs | map sqrt | map sin | map erf"), (x,)),
        "map tanh | map floor": (tc.parse("map tanh | map floor"), (x,)),
        "layer_norm rows": (tc.library.layer_norm(), (rows, w, b)),
        "rms_norm rows": (tc.library.rms_norm(), (rows, w)),
    }
    for name, (pipe, args) in cases.items():
        pipe(*args)
        print(f"{name}: {do_bench(lambda: pipe(*args), warmup=25, rep=200):.4f} ms")


if __name__ == "__main__":
    main()
