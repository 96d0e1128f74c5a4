"""Would persistent programs move P4 (`map exp | cumsum` of 2^28 float32)? A stand-alone prototype, not tricomb's
kernel: the same decoupled look-back (packed 64-bit status words, a window of predecessors), with

* tile numbers from the program id, striding by the grid (no tile counter, no atomic on the way in);
* ``P`` programs, all resident at once (P <= SMs x the blocks an SM holds, from the compiled kernel's registers
  and shared memory), so a program only ever waits on tiles that running programs own;
* with ``PREFETCH``, the next tile's load issued before this tile's look-back, so that memory stays busy while a
  program waits on its predecessors (software pipelining by hand, in registers).

``P = tiles`` is the non-persistent form (one tile per program, as CUB's DeviceScan, which relies on blocks
starting in order). Each variant is checked against a float64 cumsum, then timed by do_bench (median) beside the
copy and torch.cumsum in the same process. The status word's epoch comes from the host here (a prototype
shortcut; tricomb's kernel keeps its epoch on the device, which CUDA graphs need).

    python bench/experiments/persistent_scan.py
"""
import torch
import triton
import triton.language as tl
import triton.testing

from lookback_variants import look_back, publish  # the same look-back, beside this script


@triton.jit(do_not_specialize=["ready"])
def scan_kernel(x_ptr, y_ptr, flags, N, n_tiles, ready, BLOCK: tl.constexpr, WINDOW: tl.constexpr,
                PREFETCH: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tile = tl.program_id(0)
    step = tl.num_programs(0)
    x = tl.load(x_ptr + tile.to(tl.int64) * BLOCK + offs, mask=tile.to(tl.int64) * BLOCK + offs < N, other=0.0)
    while tile < n_tiles:
        base = tile.to(tl.int64) * BLOCK
        following = (tile + step).to(tl.int64) * BLOCK
        if PREFETCH:
            x_next = tl.load(x_ptr + following + offs, mask=following + offs < N, other=0.0)
        v = tl.where(base + offs < N, tl.exp(x), 0.0)
        within = tl.cumsum(v, 0)
        aggregate = tl.sum(v, 0)
        publish(flags, tile, ready, aggregate)
        carry = look_back(flags, tile, ready, WINDOW)
        publish(flags, tile, ready + 1, carry + aggregate)
        tl.store(y_ptr + base + offs, within + carry, mask=base + offs < N)
        if PREFETCH:
            x = x_next
        else:
            x = tl.load(x_ptr + following + offs, mask=following + offs < N, other=0.0)
        tile += step


def resident_blocks(kernel, warps: int) -> int:
    """How many blocks of ``kernel`` one H100/H200 SM holds at once (registers, shared memory, threads)."""
    regs = -(-kernel.n_regs // 8) * 8 * 32 * warps
    by_regs = 65536 // regs
    by_smem = (227 * 1024) // max(kernel.metadata.shared + 1024, 1)
    return max(min(by_regs, by_smem, 2048 // (32 * warps), 32), 1)


def main() -> None:
    n = 1 << 28
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ms = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")  # noqa: E731
    copy = ms(lambda: y.copy_(x))
    print(f"copy {copy:.3f} ms ({8 * n / copy / 1e6:.0f} GB/s); torch.cumsum(exp) "
          f"{ms(lambda: torch.cumsum(torch.exp(x), 0)):.3f} ms; torch.cumsum alone {ms(lambda: torch.cumsum(x, 0)):.3f} ms")
    want = torch.cumsum(torch.exp(x[: 1 << 24].double()), 0)
    epoch = [0]
    for block, warps, window in [(2048, 4, 32), (4096, 4, 32), (4096, 8, 32), (8192, 8, 32)]:
        tiles = triton.cdiv(n, block)
        flags = torch.zeros(tiles, dtype=torch.int64, device="cuda")

        def run(programs, prefetch):
            epoch[0] += 1
            return scan_kernel[(programs,)](x, y, flags, n, tiles, 2 * epoch[0] + 2, BLOCK=block, WINDOW=window,
                                            PREFETCH=prefetch, num_warps=warps)

        compiled = run(sms, True)
        run(sms, False)
        most = resident_blocks(compiled, warps)
        print(f"BLOCK {block}, {warps} warps: {compiled.n_regs} registers, {compiled.metadata.shared} B shared, "
              f"{most} blocks per SM", flush=True)
        for per_sm in sorted({n for n in (1, 2, most // 2, most) if 1 <= n <= most}):  # all resident, or it may hang
            for prefetch in (False, True):
                run(sms * per_sm, prefetch)
                err = ((y[: 1 << 24].double() - want).abs() / want.abs()).max().item()
                t = ms(lambda: run(sms * per_sm, prefetch))
                print(f"  persistent, {per_sm} per SM, prefetch {prefetch}: {t:.3f} ms, {8 * n / t / 1e6:.0f} GB/s, "
                      f"{copy / t:.2f} C, rel.err {err:.1e}", flush=True)
        run(tiles, False)
        err = ((y[: 1 << 24].double() - want).abs() / want.abs()).max().item()
        t = ms(lambda: run(tiles, False))
        print(f"  one tile per program (program id order): {t:.3f} ms, {copy / t:.2f} C, rel.err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
