"""The names of the scratch buffers a kernel shares across its programs, defined once for the kernel's
parameters, its body and the launcher that allocates them.

A :class:`~tricomb.lower.segments.Ticket` needs a partial per (row, program) for each accumulator field and a
ticket per row tile; a :class:`~tricomb.lower.segments.LookBack` needs a
status word per tile and, unless packed with it, the aggregate and inclusive prefix it announces, and the
status value each launch publishes (``ready``); programs sharing an attach's rows need, per attached fold, a
partial per (row, program) and a status word per (row tile, program), set to ``ready`` once its partial is out.
"""
from __future__ import annotations

from ..lower.segments import TileReduce, TileScan
from .kernel import fields

TICKETS = "tickets"
FLAGS = "flags"
READY = "ready"


def partials(fold: TileReduce) -> list[str]:
    """Per accumulator field, the buffer of partials of programs sharing a row."""
    return fields("partials", fold.width)


def aggregates(fold: TileScan) -> list[str]:
    """Per accumulator field, the buffer of tile aggregates a look-back announces."""
    return fields("aggregates", fold.width)


def prefixes(fold: TileScan) -> list[str]:
    """Per accumulator field, the buffer of tile inclusive prefixes a look-back announces."""
    return fields("prefixes", fold.width)


def shared_partials(n: int, fold: TileReduce) -> list[str]:
    """Per accumulator field of attached fold ``n``, the buffer of partials of programs sharing a row."""
    return fields(f"shared{n}_", fold.width) if fold.width > 1 else [f"shared{n}"]
