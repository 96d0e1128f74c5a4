"""The disk index: which emitted module runs a pipeline on inputs of one exact layout, across processes.

Binding a pipeline evaluates it on meta tensors, and the first such evaluation in a process imports parts of
torch (``torch._dynamo``, through torch's Python references) that take about a second. A later process that
calls the same pipeline on inputs of the same dtypes, shapes, strides, device and alignment finds the module's
file here and skips binding, planning and emitting; Triton's own cache then holds the compiled kernel.

An entry is named by a SHA-256 digest of everything that decides the module: tricomb's own source files,
torch's and Triton's versions, the pipeline's IR (stages, traced scalar functions, constants, axes, as
:func:`~tricomb.pipeline.key.ir_key` writes it, linear in the size of its expression DAGs), the inputs'
:func:`~tricomb.runtime.launch.fast_key` and torch's default dtype. What cannot be named stably (an object's
address) only makes the digest differ: a miss, never a wrong module. A
pipeline calling a user ``@triton.jit`` function is never indexed: the numbers its globals and closures hold
are copied into the module but named by nothing above.

An entry is sealed (:mod:`tricomb.store`): its name is that digest, and its seal binds the name to the content, so an
entry moved to another pipeline's name, edited, or planted is refused. It names its module by name alone (a
file of ``modules/``), with the module's full SHA-256, which the module must match before it runs.
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from types import ModuleType

import torch
import triton

from ..pipeline.ir import PipelineIR
from ..pipeline.key import ir_key
from ..scalar.ir import jit_functions
from .. import store
from .loader import load_module, read_module, write_module


def _indexable(pipeline: PipelineIR) -> bool:
    """Pipelines that call user ``@triton.jit`` functions are not indexed: the module copies the plain numbers
    their globals and closures hold, which neither their ``repr`` nor Triton's ``cache_key`` names."""
    return not any(jit_functions(fn) for fn in pipeline.functions)


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
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
    text = repr((code_digest(), torch.__version__, triton.__version__, ir_key(pipeline), layout, str(default)))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def find(pipeline: PipelineIR, key) -> tuple[ModuleType, bool] | None:
    """The module entered for ``pipeline`` on inputs of ``key`` and whether it runs interpreted, or None."""
    if not _indexable(pipeline):
        return None
    try:
        digest = _digest(pipeline, key)
    except RecursionError:  # an IR too deep to name: not indexed
        return None
    kept = store.store()
    content = kept.read_sealed("index", digest)
    if content is None:
        return None
    try:
        entry = json.loads(content)
        name, mode, sha = entry["module"], entry["mode"], entry["sha256"]
        if entry["key"] != digest or mode not in ("interpreted", "compiled"):
            raise ValueError("an entry for another key")
    except (ValueError, KeyError, TypeError):
        kept.discard("index", digest, "its content is not an index entry")
        return None
    source = read_module(name) if isinstance(name, str) else None
    if source is None or hashlib.sha256(source.encode()).hexdigest() != sha:
        return None
    interpret = mode == "interpreted"
    return load_module(source, interpret), interpret


def enter(pipeline: PipelineIR, key, source: str, interpret: bool) -> None:
    """Record that ``source`` runs ``pipeline`` on inputs of ``key`` (writing the module too if needed)."""
    if not _indexable(pipeline):
        return
    try:
        digest = _digest(pipeline, key)
    except RecursionError:
        return
    name = write_module(source)
    entry = {"key": digest, "module": name, "mode": "interpreted" if interpret else "compiled",
             "sha256": hashlib.sha256(source.encode()).hexdigest()}
    store.store().write_sealed("index", digest, json.dumps(entry).encode())
