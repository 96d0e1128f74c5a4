"""Compiled kernels kept across processes, so a new process's first launch compiles and hashes nothing.

Triton's own disk cache holds every compiled kernel, but finding one costs a new process about half a second
on its first launch, whatever the kernel (measured on the H200 with Triton 3.6, ``bench/experiments/
new_process.py``): the cache key hashes Triton's whole installation (``triton_key``, 0.4 s) and binding the
arguments imports Triton's Gluon front end (0.13 s). tricomb knows its kernels better: the module's name is the
hash of its source, and the launch's arguments are fixed by the inputs' layout. So after a launch compiled
through Triton, tricomb copies the kernel's binary and metadata into ``$TRICOMB_CACHE_DIR/binaries`` under a
digest of everything Triton specializes a kernel on, and a later process's launcher adopts it directly
(:meth:`~tricomb.codegen.host._Launcher.adopt`, copied into each emitted module).

The digest names: the module (its source's hash), the inputs' :func:`~tricomb.runtime.launch.fast_key`
(dtypes, shapes, strides, 16-byte alignment), each further argument as Triton specializes it (a tensor's dtype
and alignment; an integer's width, whether it is 1, whether 16 divides it), every meta-parameter's value, the
autotuner's configs when tuned, the GPU's compute capability, Triton's version and build, the environment
variables Triton's own cache key names, and its debug and instrumentation switches. Anything else misses:
Triton then compiles (or finds its own cache entry) as usual, and the launch is recorded again.

A record is a folder of the disk cache (:mod:`tricomb.store`) holding the kernel's files and a sealed ``record.json``
naming each file with its SHA-256; the seal binds the record to the digest it is kept under. Before a binary is
handed to Triton, the seal and every file's hash are checked: a record that fails is removed and compiled again.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import types
from pathlib import Path

import torch
import triton

from .. import store
from ..codegen.host import _Launcher

_LOG = logging.getLogger(__name__)
_RECORD = "record.json"


@functools.lru_cache(maxsize=1)
def _triton_build() -> tuple:
    """Triton's version and the size of its compiled library (a rebuilt library of the same version differs)."""
    from triton._C import libtriton

    return triton.__version__, os.stat(libtriton.__file__).st_size


def _triton_switches() -> tuple:
    """What Triton's own cache key reads from the environment and its knobs, beyond the kernel and arguments."""
    from triton._C.libtriton import get_cache_invalidating_env_vars

    knobs = triton.knobs
    return (sorted(get_cache_invalidating_env_vars().items()), knobs.runtime.debug,
            str(knobs.compilation.instrumentation_mode))


def _specialization(value):
    """How Triton specializes one argument, or None for a kind this store does not describe."""
    if isinstance(value, torch.Tensor):
        return "tensor", str(value.dtype), value.data_ptr() % 16 == 0
    if isinstance(value, bool):
        return "bool", value
    if isinstance(value, int):
        width = "i32" if -2**31 <= value < 2**31 else "i64" if -2**63 <= value < 2**63 else "u64"
        return "int", width, value == 1, value % 16 == 0
    if isinstance(value, float):
        return ("float",)
    if value is None:
        return ("none",)
    return None


def _digest(module, launcher: _Launcher, key) -> str | None:
    """The name of the record for ``launcher`` (built by ``module`` for inputs of ``key``), or None."""
    rest = [_specialization(a) for a in launcher.rest]
    if None in rest:
        return None
    tuned = [str(c) for c in launcher.fn.configs] if hasattr(launcher.fn, "configs") else None
    text = repr((module.__name__, repr(key), rest, sorted((k, repr(v)) for k, v in launcher.meta.items()), tuned,
                 torch.cuda.get_device_capability(launcher.device), _triton_build(), _triton_switches()))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def adopt(module, launcher: _Launcher, key) -> bool:
    """Give ``launcher`` the kernel recorded for it, if any; True when it did. Never raises: a record that
    fails its checks or cannot be loaded is removed, and the launcher left to Triton."""
    digest = None
    try:
        digest = _digest(module, launcher, key)
        record = _verified(digest) if digest is not None else None
        if record is None:
            return False
        compiled = _load(store.store().path("binaries", digest), record)
        with torch.cuda.device(launcher.device):
            _ = compiled.run  # loads the binary now: a damaged one fails here, not in the launch
        launcher.adopt(compiled, record["chosen"])
        return launcher.compiled is compiled
    except Exception as error:  # a record Triton cannot load: Triton compiles as usual, and it is recorded again
        _LOG.debug("tricomb: kernel record %s not adopted: %r", digest, error)
        if digest is not None:
            store.store().discard("binaries", digest, f"Triton could not load it ({type(error).__name__})")
        return False


def _verified(digest: str) -> dict | None:
    """The record kept under ``digest`` when its seal holds and every file it names matches its hash."""
    kept = store.store()
    content = kept.read_sealed("binaries", digest, _RECORD)
    if content is None:
        return None
    record = json.loads(content)
    for name, sha in record["files"].items():
        data = kept.read("binaries", digest, name)
        if data is None or hashlib.sha256(data).hexdigest() != sha:
            kept.discard("binaries", digest, f"its file {name} does not match its hash")
            return None
    return record


def _load(folder: Path, record: dict):
    from triton.compiler.compiler import CompiledKernel

    source = types.SimpleNamespace(constants={}, signature=record["signature"])  # what Triton's launcher reads
    group = {name: str(folder / name) for name in record["files"]}
    return CompiledKernel(source, group, record["hash"])


def keep(module, launcher: _Launcher, key) -> None:
    """Record the kernel Triton compiled for ``launcher``'s first launch, unless it is recorded already.
    Written whole, through a temporary folder renamed into place; a cache that is off records nothing."""
    compiled = launcher.compiled
    signature = getattr(getattr(compiled, "src", None), "signature", None)
    if compiled is None or not isinstance(signature, dict) or not store.store().enabled:
        return
    try:
        digest = _digest(module, launcher, key)
        if digest is None or store.store().path("binaries", digest).exists():
            return
        _write(digest, compiled, signature, launcher.chosen)
    except (OSError, TypeError, ValueError, AttributeError) as error:
        _LOG.debug("tricomb: kernel not recorded: %r", error)


def _write(digest: str, compiled, signature: dict, chosen) -> None:
    """The kernel's metadata and binary files, and a sealed record of what loading them needs."""
    binary = {name for name, text in compiled.asm.items() if isinstance(text, bytes)}
    paths = {name: path for name, path in compiled.metadata_group.items()
             if name == f"{compiled.name}.json" or name.rsplit(".", 1)[-1] in binary}
    files = {name: Path(path).read_bytes() for name, path in paths.items()}
    record = {"hash": compiled.hash, "signature": signature, "chosen": chosen,
              "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}}
    text = json.dumps(record).encode()  # before anything is written: a value JSON cannot hold writes nothing
    kept = store.store()
    kept.write_folder("binaries", digest, {**files, _RECORD: kept.sealed("binaries", digest, text)})
