"""Launch parameters (tile sizes, warps, how many programs share a row) chosen from sizes at launch time.

These functions are copied verbatim into every emitted module (so a saved module chooses the same way on its
own); they may use only ``triton`` and builtins. Each returns a dict of launch parameters; ``launch(...,
**overrides)`` in the emitted module replaces any of them, which is how tests force tiny tiles.

``interpret`` is True for CPU tensors run by Triton's interpreter, where each program costs Python overhead, so
tiles are as large as the data allows. On the GPU the sizes follow the usual memory-bound rules: enough
programs to fill every multiprocessor several times over, 16-byte vector loads per thread, a few thousand
elements in flight per program.
"""
import triton


def schedule_map(numel, interpret):
    """Elementwise: ``BLOCK`` elements per program over a flat index."""
    if interpret:
        return {"BLOCK": min(max(triton.next_power_of_2(numel), 16), 1 << 16), "num_warps": 4}
    if numel >= 1 << 22:
        return {"BLOCK": 4096, "num_warps": 8}
    return {"BLOCK": 1024, "num_warps": 4}


def schedule_reduce(M, K, inner, num_sms, interpret, per_tile=False):
    """Reduce ``M`` rows of ``K`` elements: ``BLOCK_M`` x ``BLOCK_K`` tiles; rows split ``SPLIT`` ways when few.

    ``inner`` is True when the reduced elements of a row are contiguous in memory (a row-wise reduction), which
    favours wide ``BLOCK_K``; otherwise the kept dimension is the contiguous one and ``BLOCK_M`` is widened.
    ``per_tile`` is True when the kernel reduces every tile across its lanes (a max-first fold): one row per
    program, 2048 elements over 4 warps a tile. (P8, logsumexp of 32768 rows of 8192 float32, took 0.267 ms so,
    0.36-0.48 ms with 2 or 4 rows a tile, and 0.32 ms as one 8192-element tile over 16 warps, the shape of
    torch.compile's kernel: bench/experiments/logsumexp_sweep.py.)
    """
    limit = 1 << 16 if interpret else 4096
    k_pow = max(triton.next_power_of_2(max(K, 1)), 2)
    if inner and per_tile and not interpret:
        block_k = min(k_pow, 2048)
        return {"BLOCK_M": 1, "BLOCK_K": block_k, "SPLIT": split_rows(M, 1, K, block_k, num_sms), "num_warps": 4}
    if inner:
        block_k = min(k_pow, limit if interpret else 2048)
        block_m = max(min(limit // block_k, triton.next_power_of_2(max(M, 1))), 1)
    else:
        block_m = min(max(triton.next_power_of_2(max(M, 1)), 2), 64 if not interpret else limit // 16)
        block_k = max(min(k_pow, limit // block_m), 2)
    split = 1 if interpret else split_rows(M, block_m, K, block_k, num_sms)
    warps = 8 if block_m * block_k >= 2048 else 4
    return {"BLOCK_M": block_m, "BLOCK_K": block_k, "SPLIT": split, "num_warps": warps}


def schedule_attach(M, K, inner, interpret, num_sms=0, columns=False, row_bytes=0, shared_mem=0):
    """Attaches over ``M`` rows of ``K`` elements: ``BLOCK_M`` rows by ``BLOCK_K`` elements a tile. A row of up
    to 16384 contiguous elements is one tile (read once, held in registers: 16 warps hold 8192 float32 in 16
    registers a thread), several rows a tile when short; a longer row is swept in tiles of 4096. With the
    reduced elements strided (a reduce along an outer axis), rows are the contiguous side: 32 a tile.

    ``num_sms`` is given for a plan whose rows programs may share (:func:`share_rows`); else ``SPLIT`` is 1.

    With fields summed over the rows (``columns``), ``PROGRAMS`` programs step through the row tiles: one an SM
    (four on the interpreter, which runs them one after another). Measured on the H200 by
    ``bench/experiments/norm_backward.py`` (the norms' backward kernels, G2 and G3, 16 warps): one program an SM
    over two, 1.075 against 1.106 ms and 0.962 against 1.024 ms. A program holding its rows in one tile waits on
    each tile's loads before its folds unless the loop over its tiles is software-pipelined: ``ROW_STAGES`` tiles
    in flight (:func:`row_stages`), 3 where they fit in ``shared_mem`` bytes of shared memory, each tile element
    reading ``row_bytes`` bytes, and then 8 warps (``bench/experiments/norm_backward.py``: G2 0.841 ms and G3
    0.844 ms, against 1.085 and 0.969 unpipelined at the 16 warps that were best so; 0.868 and 0.888 ms pipelined
    at 16 warps; two stages were slower than three in every case)."""
    limit = 1 << 16 if interpret else 16384
    k_pow = max(triton.next_power_of_2(max(K, 1)), 2)
    if inner:
        block_k = k_pow if k_pow <= limit else (limit if interpret else 4096)
        block_m = max(min((limit if interpret else 2048) // block_k, triton.next_power_of_2(max(M, 1))), 1)
    else:
        block_m = min(max(triton.next_power_of_2(max(M, 1)), 2), limit // 16 if interpret else 32)
        block_k = max(min(k_pow, (limit if interpret else 8192) // block_m), 2)
    split = share_rows(M, K, block_m, block_k, num_sms) if inner and not interpret and not columns else 1
    part_pow = triton.next_power_of_2(triton.cdiv(K, split))
    if split > 1 and part_pow > limit:
        # a part swept by one program an SM: its tiles must keep enough bytes in flight alone (N7, 2**28 float32:
        # 0.826 ms in tiles of 16384 over 32 warps, 1.104 ms in 4096 over 8: experiments/shared_rows.py)
        return {"BLOCK_M": block_m, "BLOCK_K": 16384, "SPLIT": split, "num_warps": 32}
    if split > 1:  # a part held in one tile
        block_k = part_pow
    tile = block_m * block_k
    warps = 4 if tile <= 2048 else 8 if tile <= 4096 else 16
    if columns:
        programs = max(1, min(triton.cdiv(M, block_m), 4 if interpret else num_sms))
        stages = row_stages(block_m * block_k * row_bytes, shared_mem) if K <= block_k and not interpret else 1
        return {"BLOCK_M": block_m, "BLOCK_K": block_k, "SPLIT": 1, "num_warps": 8 if stages > 1 else warps,
                "PROGRAMS": programs, "ROW_STAGES": stages}
    return {"BLOCK_M": block_m, "BLOCK_K": block_k, "SPLIT": split, "num_warps": warps}


def row_stages(tile_bytes, shared_mem):
    """How many row tiles of ``tile_bytes`` bytes a program's loop over them keeps in flight: 3 where three fit
    in ``shared_mem`` bytes (the device's shared memory a block may opt in to) with 32 KiB to spare for the
    folds' own scratch, else 1 (no pipelining)."""
    return 3 if tile_bytes and 3 * tile_bytes <= shared_mem - (32 << 10) else 1


def share_rows(M, K, block_m, block_k, num_sms):
    """How many programs share each row tile of an attach plan: 1, or when the rows are longer than a tile and
    their tiles fill at most half the GPU (a whole array, a few long rows), as many as the SMs allow (one program
    an SM, so that every program is resident at once: they wait for each other's partials), each part at least
    2048 elements, at most 256 parts (what one exchange reads in a step). ``num_sms`` 0: never shared."""
    tiles = triton.cdiv(max(M, 1), block_m)
    if not num_sms or K <= block_k or 2 * tiles > num_sms:
        return 1
    return max(min(num_sms // tiles, triton.cdiv(K, 2048), 256), 1)


def split_rows(M, block_m, K, block_k, num_sms):
    """How many programs share each row tile: 1, or when the row tiles are too few to fill the GPU and long,
    about 16 programs per SM, each at least 4 tiles. (A whole-array reduce of 2**28 bf16, P7, ran at 0.157 ms
    with 4 per SM and at 0.138 ms, torch.compile's speed, with 16: bench/experiments/split_sweep.py.)"""
    row_tiles = triton.cdiv(max(M, 1), block_m)
    if row_tiles >= 2 * num_sms or K < 8 * block_k:
        return 1
    return max(min(triton.cdiv(16 * num_sms, row_tiles), triton.cdiv(K, 4 * block_k), 4096), 1)


def schedule_scan(M, K, inner, num_sms, interpret, packing="fenced", width=1):
    """Scan ``M`` rows of ``K`` elements: ``BLOCK_M`` rows per program, ``BLOCK_K`` elements per step.

    When the row tiles are too few to fill the GPU and long, ``LOOKBACK`` gives each program one tile of
    ``BLOCK_K`` elements, its prefix found by the decoupled look-back over ``WINDOW`` predecessors at a time;
    ``PUBLISH_PREFIX`` off (tests only) makes every look-back walk back over aggregates to the row's start.
    The look-back's tile depends on how its status words carry the values (``packing``, of
    :func:`tricomb.codegen.lookback.packing`) and on the accumulator's fields (``width``), measured on the H200
    (``bench/experiments/scan_ab.py``):

    * one 32-bit field (``packing`` "one word"): 8192 elements over 4 warps, 119 registers a thread, 4 blocks
      an SM. P4 (2**28 float32) took 0.550 ms, against 0.603 ms with 4096;
    * two or three 32-bit fields in a 16-byte word (``packing`` "16 bytes"): 8192 elements for two fields, 4096
      for three, over 4 warps capped at 168 registers a thread (``maxnreg``), so that 3 blocks fit an SM
      (uncapped, 202 registers and 2 blocks). P10's pairs took 0.245 ms so, against 0.277 ms with 4096
      uncapped (19f2fb0);
    * otherwise 4096 elements over 4 warps.

    The autotuner times the neighbours (:func:`tuning_space`).
    """
    limit = 1 << 16 if interpret else 4096
    k_pow = max(triton.next_power_of_2(max(K, 1)), 2)
    look_back = {"LOOKBACK": False, "WINDOW": 16, "PUBLISH_PREFIX": True}
    if inner:
        block_k = min(k_pow, limit if interpret else 1024)
        block_m = max(min(limit // block_k, triton.next_power_of_2(max(M, 1)), 1 if not interpret else limit), 1)
    else:
        block_m = min(max(triton.next_power_of_2(max(M, 1)), 2), 64 if not interpret else limit // 16)
        block_k = max(min(k_pow, 16 if not interpret else limit // block_m), 2)
    if not interpret and triton.cdiv(M, block_m) < num_sms and K >= 16 * limit:
        wide_tile = packing == "one word" or packing == "16 bytes" and width == 2
        block_k = (2 * limit if wide_tile else limit) // block_m
        cap = {"maxnreg": 168} if packing == "16 bytes" else {}
        return {"BLOCK_M": block_m, "BLOCK_K": block_k, "num_warps": 4, **look_back, "LOOKBACK": True, **cap}
    return {"BLOCK_M": block_m, "BLOCK_K": block_k, "num_warps": 4, **look_back}


def tuning_space(cfg, entry):
    """What Triton's autotuner times, around the heuristic's choice ``cfg``: the tile entry ``entry`` halved,
    kept and doubled, each with 4 and 8 warps and the choice's own (six configs, or nine), each under the
    choice's register cap, if any."""
    size = cfg[entry]
    cap = {"maxnreg": cfg["maxnreg"]} if "maxnreg" in cfg else {}
    warps = sorted({4, 8, cfg["num_warps"]})
    return [{entry: s, "num_warps": w, **cap} for s in (size // 2, size, size * 2) for w in warps if s >= 16]


def schedule_foreach(largest, total, interpret):
    """Foreach: ``BLOCK`` elements of one tensor per program: 1024 with 4 warps, or the largest tensor's size
    rounded up to a power of two where that is smaller (a list of small tensors is one program each). Measured
    on the H200 (bench/experiments/foreach_schedule.py, O1's AdamW over 1e9 float32 elements): 1024 elements and
    4 warps 6.82 ms, 2048 and 4 7.52 ms, 4096 and 8 9.46 ms (torch's fused AdamW 8.57 ms)."""
    if interpret:
        return {"BLOCK": min(max(triton.next_power_of_2(largest), 16), 1 << 16), "num_warps": 4}
    return {"BLOCK": max(128, min(1024, triton.next_power_of_2(largest))), "num_warps": 4}
