"""The disk index: which emitted module runs a pipeline on inputs of one exact layout, across processes.

Binding a pipeline evaluates it on meta tensors, and the first such evaluation in a process imports parts of
torch (``torch._dynamo``, through torch's Python references) that take about a second. A later process that
calls the same pipeline on inputs of the same dtypes, shapes, strides, device and alignment finds the module's
file here and skips binding, planning and emitting; Triton's own cache then holds the compiled kernel.

An entry is named by a SHA-256 digest of everything that decides the module: tricomb's own source files,
torch's and Triton's versions, the pipeline's IR (its ``repr``: stages, traced scalar functions, constants,
axes), the inputs' :func:`~tricomb.runtime.launch.fast_key` and torch's default dtype. What cannot be named
stably (an object's address in a ``repr``) only makes the digest differ: a miss, never a wrong module. A
pipeline calling a user ``@triton.jit`` function is never indexed: the numbers its globals and closures hold
are copied into the module but named by nothing above.
Entries are written atomically beside the modules, under ``$TRICOMB_CACHE_DIR/index``.
"""
from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from pathlib import Path
from types import ModuleType

import torch
import triton

from ..pipeline.ir import PipelineIR
from ..scalar.ir import jit_functions
from .loader import cache_dir, load_module, write_module


def _indexable(pipeline: PipelineIR) -> bool:
    """Pipelines that call user ``@triton.jit`` functions are not indexed: the module copies the plain numbers
    their globals and closures hold, which neither their ``repr`` nor Triton's ``cache_key`` names."""
    return not any(jit_functions(fn) for fn in pipeline.functions)


@functools.lru_cache(maxsize=1)
def _code() -> str:
    """A digest of tricomb's own source files: a change to the code generator misses every older entry."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _digest(pipeline: PipelineIR, key) -> str:
    inputs, default = key
    layout = [(str(dtype), tuple(shape), tuple(stride), str(device), *rest) for dtype, shape, stride, device, *rest
              in inputs]
    text = repr((_code(), torch.__version__, triton.__version__, repr(pipeline), layout, str(default)))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _path(pipeline: PipelineIR, key):
    folder = cache_dir() / "index"
    folder.mkdir(exist_ok=True)
    return folder / _digest(pipeline, key)


def find(pipeline: PipelineIR, key) -> tuple[ModuleType, bool] | None:
    """The module entered for ``pipeline`` on inputs of ``key`` and whether it runs interpreted, or None."""
    if not _indexable(pipeline):
        return None
    try:
        path = _path(pipeline, key)
        if not path.exists():
            return None
        name, mode = path.read_text().split()
        source = (cache_dir() / name).read_text()
    except (OSError, ValueError, RecursionError):  # unreadable, half-removed, or an IR too deep to name
        return None
    interpret = mode == "interpreted"
    return load_module(source, interpret), interpret


def enter(pipeline: PipelineIR, key, source: str, interpret: bool) -> None:
    """Record that ``source`` (already written by the loader) runs ``pipeline`` on inputs of ``key``."""
    if not _indexable(pipeline):
        return
    try:
        name = write_module(source).name
        path = _path(pipeline, key)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_")
        with os.fdopen(fd, "w") as f:
            f.write(f"{name} {'interpreted' if interpret else 'compiled'}\n")
        os.replace(tmp, path)
    except (OSError, RecursionError):  # a read-only cache, or an IR too deep to name: not indexed
        return
