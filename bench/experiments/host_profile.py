"""Where the host time goes: cProfile of 2000 repeated calls of ``map softplus | sum`` on 4096 float32, and of the
first call in a new process whose caches hold the kernel (run this twice with the same cache directories)."""
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
torch.randn(1, device="cuda")
torch.cuda.synchronize()
start = time.perf_counter()
import tricomb as tc  # noqa: E402

x = torch.randn(4096, device="cuda")
pipe = tc.parse("map softplus | sum")
profile = cProfile.Profile()
profile.enable()
pipe(x)
torch.cuda.synchronize()
profile.disable()
print(f"import + first call: {time.perf_counter() - start:.3f} s")
pstats.Stats(profile).sort_stats("cumtime").print_stats(25)
if len(sys.argv) > 1:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(2000):
        pipe(x)
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(25)
