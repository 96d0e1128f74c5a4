"""Loading an emitted module: kept in the disk cache under the hash of its source, run from memory.

A module is always executed from the source tricomb holds in memory, never from what a file says: the text is
compiled and run with the file's path as its name, and put in :mod:`linecache` under that path, so Triton (which
reads a ``@triton.jit`` function's source through :mod:`inspect`) sees exactly that text. The file in the disk
cache (:mod:`tricomb.store`, ``modules/``) is for people reading it and for later processes, which find it through
the index and verify it against its hash before it runs.

Triton decides at decoration time whether a ``@triton.jit`` function is interpreted, so one source is loaded
twice when needed: with the interpreter on (for CPU tensors) and off (for CUDA tensors). The interpreter switch
is process-wide, so loading holds :data:`~tricomb.serial.SERIAL`.
"""
from __future__ import annotations

import hashlib
import linecache
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy
import triton

from ..errors import DeviceError
from .. import store
from ..serial import SERIAL
from . import tuning
from .lru import LRU

_LOADED: LRU = LRU(256)  # (module name, interpreted) -> module
_DIGITS = 32  # hex digits of a module's SHA-256 in its name


def module_name(source: str) -> str:
    """The name of the module ``source``: ``tricomb_`` and the first 128 bits of its SHA-256."""
    return f"tricomb_{hashlib.sha256(source.encode()).hexdigest()[:_DIGITS]}"


def cache_dir() -> Path | None:
    """Where emitted modules are kept (``modules/`` of the disk cache), or None while the disk cache is off."""
    kept = store.store()
    return kept.root / "modules" if kept.enabled else None


def write_module(source: str) -> str:
    """Keep ``source`` in the disk cache under its hash (rewriting a damaged copy) and return its name."""
    name = module_name(source)
    kept = store.store()
    if kept.read_verified("modules", f"{name}.py", name[len("tricomb_"):]) is None:
        kept.write("modules", f"{name}.py", source.encode())
    return name


def read_module(name: str) -> str | None:
    """The source kept under ``name`` when it hashes to that name, else None (a damaged copy is removed)."""
    if not re.fullmatch(rf"tricomb_[0-9a-f]{{{_DIGITS}}}", name):
        return None
    data = store.store().read_verified("modules", f"{name}.py", name[len("tricomb_"):])
    try:
        return data.decode() if data is not None else None
    except UnicodeDecodeError:
        return None


def load_module(source: str, interpret: bool) -> ModuleType:
    """The module ``source``, with Triton's interpreter on or off for its ``@triton.jit`` functions.
    Raises DeviceError, before anything runs, for the interpreter when it cannot run beside this numpy."""
    if interpret:
        require_interpreter()
    with SERIAL:
        name = write_module(source)
        key = (name, interpret)
        module = _LOADED.get(key)
        if module is None:
            module = _LOADED[key] = _execute(source, name, interpret)
        return module


def _execute(source: str, name: str, interpret: bool) -> ModuleType:
    """Run ``source`` as a new module, its text registered in linecache under the path it is kept at."""
    folder = cache_dir()
    path = str(folder / f"{name}.py") if folder is not None else f"<tricomb module {name}>"
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)  # (no mtime: never re-read)
    qualified = f"{name}_{'interpreted' if interpret else 'compiled'}"
    module = ModuleType(qualified)
    module.__file__ = path
    code = compile(source, path, "exec", dont_inherit=True)
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = interpret
        sys.modules[qualified] = module
        try:
            exec(code, module.__dict__)
        except BaseException:
            sys.modules.pop(qualified, None)
            raise
    if hasattr(module, "TUNING"):  # (a module whose launch is never tuned has none: a foreach kernel's)
        module.TUNING["reporters"] = tuning.REPORTERS  # the CLI's progress bar sees every kernel's tuning
    return module


def require_interpreter() -> None:
    """Raises DeviceError when Triton's interpreter cannot run CPU tensors beside the numpy installed."""
    if problem := interpreter_problem(triton.__version__, numpy.__version__):
        raise DeviceError(problem)


def _release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string ("3.6.0+git", "3.6rc1", "2.4.0.dev0"), or None if it has none."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else None


def interpreter_problem(triton_version: str, numpy_version: str) -> str | None:
    """Why Triton's interpreter (CPU tensors) cannot run beside this numpy, or None. Triton 3.6's interpreter
    calls ``int()`` on 1-element arrays, which numpy 2.4 refuses; Triton 3.7 and newer do not
    (each run on this repository's CPU suite with numpy 2.4.6). Checked here rather than pinned: a package's
    requirements cannot make numpy's bound depend on Triton's version."""
    triton_release, numpy_release = _release(triton_version), _release(numpy_version)
    if triton_release is None or numpy_release is None:
        return None  # a version that names no release: nothing to tell
    if triton_release < (3, 7) and numpy_release >= (2, 4):
        return (f"CPU tensors run through Triton's interpreter, and Triton {triton_version}'s cannot run beside "
                f"numpy {numpy_version} (it calls int() on 1-element arrays, which numpy 2.4 refuses): install "
                "numpy below 2.4 (pip install \"numpy<2.4\") or Triton 3.7 or newer; CUDA tensors are not affected")
    return None
