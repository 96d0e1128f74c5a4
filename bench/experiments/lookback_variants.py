"""Which details of the decoupled look-back cost P4 (`map exp | cumsum` of 2^28 float32) its time? A stand-alone
prototype, not tricomb's kernel: one tile per program, tiles numbered by program id, packed 64-bit status words
(the status in the high half, the float32's bits in the low half), a window of predecessors read at once. Each
switch is a constexpr:

* ``INIT``: how a launch tells its status words from an earlier launch's.
  0, a status value passed by the host (``ready = 2 * epoch + 2``; tricomb's scheme since this experiment,
  which zeroes the words under CUDA graph capture);
  1, the words zeroed before each launch (CUB's way; the memset is timed with the kernel);
  2, an epoch kept on the device, read by every program and advanced by the last one to finish, counted by an
  acquire-release atomic at each program's end (tricomb's scheme at 5c5916c).
* ``SUM_FIRST``: publish the tile's aggregate (a ``tl.sum``) before the scan within the tile, so that successors
  see it sooner; the scan then overlaps the look-back's wait.
* ``HINTS``: stream the data past the caches (``evict_first`` loads, ``.cs`` stores), leaving L2 to the status
  words.

Each variant is checked against a float64 cumsum of the first 2^24 elements, then timed by do_bench (median)
beside the copy and torch.cumsum (CUB) in the same process. ``regs`` times the best variant with its registers
capped (``maxnreg``: more blocks per SM, at the risk of spills) and with 64 elements a thread.

    python bench/experiments/lookback_variants.py [regs]
"""
import sys

import torch
import triton
import triton.language as tl
import triton.testing


@triton.jit
def look_back(flags, tile, ready, WINDOW: tl.constexpr):
    """The sum of every tile before ``tile``: the newest inclusive prefix in reach and the aggregates after it."""
    carry = 0.0
    look = tile - 1
    while look >= 0:
        behind = look - WINDOW + 1 + tl.arange(0, WINDOW)
        live = behind >= 0
        words = tl.load(flags + behind, mask=live, other=0, volatile=True)
        status = tl.where(live, words >> 32, ready)
        while tl.min(status, 0) < ready:
            words = tl.load(flags + behind, mask=live, other=0, volatile=True)
            status = tl.where(live, words >> 32, ready)
        newest = tl.max(tl.where(status == ready + 1, behind, -1), 0)
        values = (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
        carry += tl.sum(tl.where(live & (behind >= newest), values, 0.0), 0)
        look = tl.where(newest >= 0, -1, look - WINDOW)
    return carry


@triton.jit
def publish(flags, tile, status, value):
    bits = value.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    tl.atomic_xchg(flags + tile, (status.to(tl.int64) << 32) | bits, sem="relaxed")


@triton.jit(do_not_specialize=["host_ready"])
def scan_kernel(x_ptr, y_ptr, flags, state, N, host_ready, BLOCK: tl.constexpr, WINDOW: tl.constexpr,
                INIT: tl.constexpr, SUM_FIRST: tl.constexpr, HINTS: tl.constexpr):
    tile = tl.program_id(0)
    if INIT == 0:
        ready = host_ready
    elif INIT == 1:
        ready = 1
    else:
        epoch = tl.load(state + 1, volatile=True)
        ready = (2 * epoch + 2).to(tl.int32)
    offs = tile.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < N
    if HINTS:
        x = tl.load(x_ptr + offs, mask=inside, other=0.0, eviction_policy="evict_first")
    else:
        x = tl.load(x_ptr + offs, mask=inside, other=0.0)
    v = tl.where(inside, tl.exp(x), 0.0)
    if SUM_FIRST:
        aggregate = tl.sum(v, 0)
        publish(flags, tile, ready, aggregate)
        within = tl.cumsum(v, 0)
        carry = look_back(flags, tile, ready, WINDOW)
    else:
        within = tl.cumsum(v, 0)
        aggregate = tl.sum(v, 0)
        publish(flags, tile, ready, aggregate)
        carry = look_back(flags, tile, ready, WINDOW)
    publish(flags, tile, ready + 1, carry + aggregate)
    if HINTS:
        tl.store(y_ptr + offs, within + carry, mask=inside, cache_modifier=".cs")
    else:
        tl.store(y_ptr + offs, within + carry, mask=inside)
    if INIT == 2:
        finished = tl.atomic_add(state, 1, sem="acq_rel")
        last = finished == tl.num_programs(0) - 1
        tl.atomic_xchg(state, 0, mask=last)
        tl.atomic_xchg(state + 1, epoch + 1, mask=last)


def main() -> None:
    n = 1 << 28
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    ms = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")  # noqa: E731
    copy = ms(lambda: y.copy_(x))
    cub = ms(lambda: torch.cumsum(x, 0))
    print(f"copy {copy:.3f} ms ({8 * n / copy / 1e6:.0f} GB/s); torch.cumsum alone (CUB) {cub:.3f} ms", flush=True)
    want = torch.cumsum(torch.exp(x[: 1 << 24].double()), 0)
    host_epoch = [0]
    variants = [(4096, 4, 32, init, first, hints, None) for init in (0, 1, 2) for first in (0, 1) for hints in (0, 1)]
    variants += [(block, warps, 32, 1, first, hints, None) for block, warps in [(2048, 2), (2048, 4), (4096, 8),
                                                                                (8192, 8)]
                 for first in (0, 1) for hints in (0, 1)]
    variants += [(4096, 4, window, 1, first, 0, None) for window in (16, 64) for first in (0, 1)]
    if "regs" in sys.argv[1:]:
        variants = [(4096, 4, window, 0, 1, 0, regs) for window in (16, 32) for regs in (None, 72, 64, 56)]
        variants += [(8192, 4, 16, 0, 1, 0, regs) for regs in (None, 128)] + [(2048, 2, 16, 0, 1, 0, 64)]
    for block, warps, window, init, first, hints, regs in variants:
        tiles = triton.cdiv(n, block)
        flags = torch.zeros(tiles, dtype=torch.int64, device="cuda")
        state = torch.zeros(2, dtype=torch.int64, device="cuda")

        def run():
            if init == 1:
                flags.zero_()
            host_epoch[0] += 1
            return scan_kernel[(tiles,)](x, y, flags, state, n, 2 * host_epoch[0] + 2, BLOCK=block, WINDOW=window,
                                         INIT=init, SUM_FIRST=first, HINTS=hints, num_warps=warps,
                                         **({"maxnreg": regs} if regs else {}))

        compiled = run()
        err = ((y[: 1 << 24].double() - want).abs() / want.abs()).max().item()
        t = ms(run)
        print(f"{block} x {warps} warps, window {window}, INIT {init}, SUM_FIRST {first}, HINTS {hints}, "
              f"maxnreg {regs}: "
              f"{compiled.n_regs} registers; {t:.3f} ms, {copy / t:.3f} C, {cub / t:.2f}x CUB, rel.err {err:.1e}",
              flush=True)


if __name__ == "__main__":
    main()
