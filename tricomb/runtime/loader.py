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
import re
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import numpy
import triton

from ..errors import DeviceError
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
    """Import the module ``source``, with Triton's interpreter on or off for its ``@triton.jit`` functions.
    Raises DeviceError, before anything runs, for the interpreter when it cannot run beside this numpy."""
    if interpret:
        require_interpreter()
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
