"""Writing an emitted module to the cache directory (atomically) and importing it.

Triton reads a kernel's source from its file, so every module lives on disk: ``$TRICOMB_CACHE_DIR``, or
``~/.cache/tricomb``. A module is named by the hash of its source and written once, through a temporary file
and ``os.replace``, so concurrent processes never see half a file. Triton decides at decoration time whether a
``@triton.jit`` function is interpreted, so one source is imported twice when needed: once with the
interpreter on (for CPU tensors) and once with it off (for CUDA tensors).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import triton

from . import tuning

_LOADED: dict[tuple[str, bool], ModuleType] = {}


def cache_dir() -> Path:
    """Where emitted modules are written: ``$TRICOMB_CACHE_DIR`` or ``~/.cache/tricomb``."""
    root = os.environ.get("TRICOMB_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tricomb")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_module(source: str) -> Path:
    """Write ``source`` under its hash in :func:`cache_dir` (once) and return the path."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    path = cache_dir() / f"tricomb_{digest}.py"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_", suffix=".py")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    return path


def load_module(source: str, interpret: bool) -> ModuleType:
    """Import the module ``source``, with Triton's interpreter on or off for its ``@triton.jit`` functions."""
    path = write_module(source)
    key = (path.stem, interpret)
    if key in _LOADED:
        return _LOADED[key]
    name = f"{path.stem}_{'interpreted' if interpret else 'compiled'}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = interpret
        sys.modules[name] = module
        spec.loader.exec_module(module)
    module.TUNING["reporters"] = tuning.REPORTERS  # the CLI's progress bar sees every kernel's tuning
    _LOADED[key] = module
    return module
