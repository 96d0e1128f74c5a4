"""``tricomb cache info`` and ``tricomb cache clear``: what the disk cache holds, and emptying it.

The cache is described in :mod:`tricomb.store` and ``docs/reliability.md``.
"""
from __future__ import annotations

from collections import Counter

from .. import store

_STATES = {"private": "in use (private to this user)",
           "fallback": "refused; this process used its own directory instead",
           "off": "off for this process"}


def info() -> list[tuple[str, str]]:
    """Rows (what, value) describing the disk cache as this process finds it."""
    kept = store.store()
    rows = [("location", str(store.requested_dir())), ("state", _STATES[kept.state])]
    if kept.reason:
        rows.append(("why", kept.reason))
    rows.append(("size limit", f"{store.max_bytes() / 2**20:.0f} MiB (TRICOMB_CACHE_MAX_MB)"))
    if kept.state != "private":
        return rows
    entries = kept.entries()
    counts = Counter(kind for kind, *_ in entries)
    sizes = Counter()
    for kind, _, size, _ in entries:
        sizes[kind] += size
    for kind in store.KINDS:
        rows.append((kind, f"{counts[kind]} entries, {_size(sizes[kind])}"))
    rows.append(("total", f"{len(entries)} entries, {_size(sum(sizes.values()))}"))
    return rows


def clear() -> tuple[bool, str]:
    """Remove every entry of the disk cache: whether it could be, and a line saying what was freed or why not."""
    kept = store.store()
    if kept.state != "private":
        return False, (f"nothing cleared: the disk cache {store.requested_dir()} is {_STATES[kept.state]}"
                       + (f" ({kept.reason})" if kept.reason else "") + "; fix that (the warning says how) or remove "
                       "the directory yourself")
    count = len(kept.entries())
    freed = kept.clear()
    return True, f"removed {count} entries ({_size(freed)}) from {kept.root}"


def _size(count: int) -> str:
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else f"{count / 2**10:.1f} KiB"
