"""Emitting the decoupled look-back: how a scan's tile finds the prefix of every tile before it in one pass.

The algorithm is Merrill and Garland's, "Single-pass Parallel Prefix Scan with Decoupled Look-back" (NVIDIA
technical report NVR-2016-002). Each tile of a row gets a status word in ``flags``. The launcher passes each
launch a larger ``ready`` than the last (``_StatusWords`` in the emitted module), so words left by earlier
launches need no clearing:

* below ``ready``: nothing published yet in this launch;
* ``ready``: the tile's aggregate (its own elements folded) is out;
* ``ready + 1``: the tile's inclusive prefix (every element up to its end) is out.

A tile publishes its aggregate (before its own scan when the operator commutes, after it otherwise), then looks
back over a window of ``WINDOW`` predecessors at a time: it waits until each has published something, folds in
order the newest inclusive prefix and the aggregates after it, and stops at that prefix (or at the row's
start); then it publishes its own inclusive prefix. A tile waits only on tiles numbered before it: lower
program ids, which the GPU starts first.

A status word and the values it announces are always read together (:func:`packing`):

* one field of 32 bits or fewer (a float32 or int32 sum, say) is packed with its status into one 64-bit word,
  written and read in one access (the status in the high half, the value's bits in the low half), no fence;
* two or three such fields (a linear recurrence's pairs, say) share one 16-byte word with their status: the
  status, then each field's bits, written in one 16-byte store and read in one 16-byte load (an aligned
  16-byte access is performed as one, which CUB's tile status words rely on too), no fence. On P10's pairs
  this took 0.275 ms against 0.309 ms for the fenced scheme below (``bench/experiments/scan_ab.py``);
* otherwise (four fields or more, a 64-bit field) the values are written to ``aggregates``/``prefixes`` before
  the one status word (a CTA barrier, then a release) and read after it (an acquire, then a barrier), and are
  never overwritten within a launch.
"""
from __future__ import annotations

import torch

from ..lower.segments import LookBack, TileScan
from ..scalar.dtypes import held_dtype
from .fold import acc_type, identity_text, tile_reduce, tile_scan
from .kernel import fields, scalar_where
from .scratch import FLAGS, aggregates as aggregate_buffers, prefixes as prefix_buffers
from .writer import Writer

_LOW = "0xFFFFFFFF"
_SMALL = (torch.float32, torch.int32, torch.bool)
ONE_WORD, SIXTEEN_BYTES, FENCED = "one word", "16 bytes", "fenced"  # how a status word carries its values


def packing(scan: TileScan) -> str:
    """How a tile's status word carries the values it announces: ``ONE_WORD`` (one field of 32 bits or fewer, in
    the low half of a 64-bit word), ``SIXTEEN_BYTES`` (two or three such fields, beside the status in one
    16-byte word: two 64-bit words of ``flags``), or ``FENCED`` (the values apart, under a 64-bit status word)."""
    if not all(held_dtype(d) in _SMALL for d in scan.acc_dtypes) or scan.width > 3:
        return FENCED
    return ONE_WORD if scan.width == 1 else SIXTEEN_BYTES


def _bits32(dtype: torch.dtype, value: str) -> str:
    """The 32 bits of a float32, int32 or bool ``value`` as an int32."""
    return {torch.float32: f"{value}.to(tl.int32, bitcast=True)", torch.int32: value,
            torch.bool: f"{value}.to(tl.int32)"}[held_dtype(dtype)]


def _from_bits32(dtype: torch.dtype, bits: str) -> str:
    """The float32, int32 or bool value whose bits are the int32 ``bits``."""
    return {torch.float32: f"{bits}.to(tl.float32, bitcast=True)", torch.int32: bits,
            torch.bool: f"({bits} != 0)"}[held_dtype(dtype)]


def _bits(scan: TileScan, value: str) -> str:
    """The 64-bit word holding ``value``'s 32 bits in its low half."""
    return f"({_bits32(scan.acc_dtypes[0], value)}.to(tl.int64) & {_LOW})"


def _unbits(scan: TileScan, word: str) -> str:
    """The value whose bits are the low half of ``word``."""
    return _from_bits32(scan.acc_dtypes[0], f"({word} & {_LOW}).to(tl.int32)")


def _publish(w: Writer, scan: TileScan, values: list[str], prefix: bool) -> None:
    """Publish this tile's aggregate (or with ``prefix`` its inclusive prefix), one value per field, at
    ``slot``."""
    status = "ready + 1" if prefix else "ready"
    if packing(scan) == SIXTEEN_BYTES:
        bits = [_bits32(d, v) for d, v in zip(scan.acc_dtypes, values)] + ["0"] * (3 - len(values))
        w.line(f"tc_put_status16({FLAGS}, slot, {status}, {', '.join(bits)}, row_mask)",
               comment="the status and the values in one 16-byte store")
        return
    if packing(scan) == ONE_WORD:
        w.line(f'tl.atomic_xchg({FLAGS} + slot, ({status}).to(tl.int64) << 32 | {_bits(scan, values[0])}, '
               'mask=row_mask, sem="relaxed")', comment="the status in the high half, the value in the low half")
        return
    for buffer, value in zip(prefix_buffers(scan) if prefix else aggregate_buffers(scan), values):
        w.line(f"tl.store({buffer} + slot, {value}, mask=row_mask)")
    w.line("tl.debug_barrier()", comment="every thread's store is done before the status word is released")
    w.line(f'tl.atomic_xchg({FLAGS} + slot, ({status}).to(tl.int64), mask=row_mask, sem="release")')


def _wait_for_window(w: Writer, scan: TileScan) -> None:
    """``status``: the status words of the window's predecessors, once every one of them has published (and
    ``words``, which hold their values too, when packed)."""
    if packing(scan) == ONE_WORD:
        reads = [f"words = tl.load({FLAGS} + peers, mask=live, other=0, volatile=True)",
                 "status = tl.where(live, words >> 32, ready)"]
    elif packing(scan) == SIXTEEN_BYTES:
        reads = [f"status, bits0, bits1, bits2 = tc_get_status16({FLAGS}, tl.where(live, peers, 0))",
                 "status = tl.where(live, status, ready)"]
    else:
        reads = [f'status = tl.where(live, tl.atomic_add({FLAGS} + peers, 0, mask=live, sem="acquire"), ready)']
    reads.append("waiting = tl.reduce(status, None, tl.standard._elementwise_min) < ready")
    w.lines(reads)
    with w.block("while waiting:"):
        w.comment("a predecessor has published nothing yet: it is running (it started first); read again")
        w.lines(reads)
    if packing(scan) == FENCED:
        w.line("tl.debug_barrier()", comment="the values announced are read after every status word")


def _window_parts(w: Writer, scan: TileScan) -> list[str]:
    """Per field, the window's values: the newest prefix, the aggregates after it, the identity elsewhere."""
    if packing(scan) == ONE_WORD:
        w.line(f"part = tl.where(from_prefix | from_aggregate, {_unbits(scan, 'words')}, {identity_text(scan)})")
        return ["part"]
    parts = fields("part", scan.width)
    if packing(scan) == SIXTEEN_BYTES:
        w.lines([f"{part} = tl.where(from_prefix | from_aggregate, {_from_bits32(d, f'bits{j}')}, {identity_text(scan, j)})"
                 for j, (part, d) in enumerate(zip(parts, scan.acc_dtypes))])
        return parts
    for j, (part, aggregates, prefixes) in enumerate(zip(parts, aggregate_buffers(scan), prefix_buffers(scan))):
        identity = identity_text(scan, j)
        w.line(f'{part} = tl.where(from_prefix, tl.load({prefixes} + peers, mask=from_prefix, other={identity}, '
               f'cache_modifier=".cg"), tl.load({aggregates} + peers, mask=from_aggregate, other={identity}, '
               'cache_modifier=".cg"))')
    return parts


def _window_fold(w: Writer, scan: TileScan, combine: str) -> list[str]:
    """Each row's fold, in order, of the newest inclusive prefix in the window and the aggregates after it."""
    w.line("newest = tl.reduce(tl.where(status == ready + 1, behind[None, :], -1), 1, tl.standard._elementwise_max)",
           comment="per row: the newest predecessor whose prefix is out (-1: none in the window)")
    w.line("from_prefix = live & (behind[None, :] == newest[:, None])")
    w.line("from_aggregate = live & (behind[None, :] > newest[:, None])")
    parts = _window_parts(w, scan)
    in_order, window = fields("in_order", scan.width), fields("window", scan.width)
    w.line(f"{', '.join(in_order)} = {tile_scan(scan, parts, 1, combine)}", comment="in order")
    for j, (total, scanned) in enumerate(zip(window, in_order)):
        w.line(f"{total} = tc_last({scanned}, WINDOW).to({acc_type(scan, j)})")
    return window


def tree_aggregate(scan: TileScan, tiles: list[str], combine: str) -> list[str]:
    """The tile's aggregate folded as a tree, for an operator that commutes: emitted before the tile's own scan,
    so that successors waiting on it need not wait for that scan too (P4's prototype: 0.757 -> 0.696 ms,
    ``bench/experiments/lookback_variants.py``, SUM_FIRST). Its rounding can differ from the scan's last column
    (a float sum's last bit), so a tile's successors may start from a prefix one ulp off the tile's own last
    output (docs/numerics.md)."""
    return [tile_reduce(scan, tiles, 1, combine)]


def last_column(scan: TileScan, within: list[str]) -> list[str]:
    """The tile's aggregate in order, for an operator that does not commute: the last column of its scan
    ``within`` (``tl.reduce`` on the GPU does not keep order)."""
    return [f"tc_last({scanned}, BLOCK_K)" for scanned in within]


def emit_publish_aggregate(w: Writer, segment: LookBack, folded: list[str]) -> None:
    """The look-back segment's first part, inside ``if LOOKBACK:``: set ``slot`` (the tile's status word) and
    ``aggregate`` (one name per field) to ``folded`` (:func:`tree_aggregate`'s one expression of every field, or
    :func:`last_column`'s one per field), and publish it."""
    scan = segment.fold
    aggregates = fields("aggregate", scan.width)
    w.comment("decoupled look-back (Merrill and Garland 2016): this tile's aggregate, for its successors")
    w.line("slot = rows * SPLIT + chunk")
    if len(folded) == 1:
        w.line(f"{', '.join(aggregates)} = {folded[0]}")
    else:
        w.lines([f"{name} = {value}" for name, value in zip(aggregates, folded)])
    for j, name in enumerate(aggregates):
        w.line(f"{name} = {name}.to({acc_type(scan, j)})")
    _publish(w, scan, aggregates, prefix=False)


def emit_look_back(w: Writer, segment: LookBack, combine: str) -> None:
    """The look-back segment's second part, inside ``if LOOKBACK:``, after the tile's own scan: set the carries
    to the exclusive prefix of the tile (every element of the row before it) and publish the tile's inclusive
    prefix (unless ``PUBLISH_PREFIX`` is off, which tests use to walk back over aggregates alone). Uses ``slot``
    and ``aggregate`` from :func:`emit_publish_aggregate`, emitted earlier in this kernel under ``if LOOKBACK:``
    (a constexpr, so one block's names reach the other)."""
    scan = segment.fold
    carries, aggregates = fields("carry", scan.width), fields("aggregate", scan.width)
    w.comment("the prefix of the tiles before this one")
    w.line(f"done = {scalar_where('chunk == 0', 'True', 'rows >= M')}")
    w.line("look = chunk - 1", comment="the newest predecessor not yet folded")
    with w.block("while look >= 0:"):
        w.line("behind = look - WINDOW + 1 + tl.arange(0, WINDOW)")
        w.line("live = (done == 0)[:, None] & (behind >= 0)[None, :]")
        w.line("peers = rows[:, None] * SPLIT + behind[None, :]")
        _wait_for_window(w, scan)
        window = _window_fold(w, scan, combine)
        w.line(f"{', '.join(carries)} = {combine}({', '.join(window + carries)})",
               comment="the window comes before what is folded so far")
        w.line("done = done | (newest >= 0)")
        w.line("finished = tl.reduce(done.to(tl.int32), None, tl.standard._elementwise_min) == 1")
        w.line("look = tl.where(finished, -1, look - WINDOW)")
    with w.block("if PUBLISH_PREFIX:"):
        inclusive = fields("inclusive", scan.width)
        w.line(f"{', '.join(inclusive)} = {combine}({', '.join(carries + aggregates)})")
        _publish(w, scan, inclusive, prefix=True)
