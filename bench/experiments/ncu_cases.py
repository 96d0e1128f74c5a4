"""One case of the suite under Nsight Compute: where its kernels stall, against torch.compile's and the other
baselines' kernels for the same case. Each implementation runs once outside the profiled range (compiling and,
for tricomb, autotuning as the suite does), then once inside an NVTX range named ``profile``:

    ncu --clock-control none --nvtx --nvtx-include "profile/" --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section LaunchStats [--section InstructionStats] python bench/experiments/ncu_cases.py P4
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from run import _cases  # noqa: E402


def main(name: str) -> None:
    case = next(c for c in _cases() if c.name == name)
    inputs = case.make_inputs()
    pipe = case.pipeline()
    impls = {"tricomb": pipe, "torch.compile": torch.compile(case.eager), **case.others}
    for fn in impls.values():
        fn(*inputs)
    torch.cuda.synchronize()
    for label, fn in impls.items():
        torch.cuda.nvtx.range_push("profile")
        fn(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        print(f"profiled: {name} {label}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
