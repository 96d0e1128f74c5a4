"""The runtime libraries an emitted module copies from, and the closure of what its own code reads.

A library is a real Python module whose top-level definitions an emitted module may hold: the device helpers
(:mod:`.device`), the schedule functions (:mod:`tricomb.lower.schedule`) and the host runtime (:mod:`.host`).
Each definition (a function, a class or an assignment) is known by the name it binds and is copied as its
source (with the comment lines right above it); the names it reads are found with ``ast``. A module holds the
definitions its own code reads, the definitions those read, and so on, each once, in the libraries' order and
their source order, and the imports those definitions read.
"""
from __future__ import annotations

import ast
import functools
import inspect
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Definition:
    """One top-level definition of a library: the name it binds, its source, its syntax tree and the names it
    reads."""

    name: str
    source: str
    node: ast.stmt
    reads: frozenset[str]


@dataclass(frozen=True)
class Import:
    """One top-level import of a library: its source, the name it binds, and the dotted path a definition must
    read for it to be needed (``triton.testing`` for ``import triton.testing``, which binds ``triton``)."""

    source: str
    binds: str
    path: str


@dataclass(frozen=True)
class Library:
    """The definitions (by name, in source order) and imports of a module copied from."""

    definitions: dict[str, Definition]
    imports: tuple[Import, ...]


def reads(node: ast.AST) -> frozenset[str]:
    """The names ``node`` reads and the dotted paths it reads through them (``triton.testing.do_bench`` gives
    ``triton``, ``triton.testing`` and ``triton.testing.do_bench``). Locals count too: a local named like a
    definition only copies that definition needlessly."""
    found = set()
    for sub in ast.walk(node):
        path = []
        while isinstance(sub, ast.Attribute):
            path.append(sub.attr)
            sub = sub.value
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            parts = [sub.id, *reversed(path)]
            found.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
    return frozenset(found)


def _bound(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _imports(node: ast.Import | ast.ImportFrom, lines: list[str]) -> list[Import]:
    source = "\n".join(lines[node.lineno - 1:node.end_lineno])
    if isinstance(node, ast.ImportFrom):
        return [Import(source, a.asname or a.name, a.asname or a.name) for a in node.names]
    return [Import(source, a.asname or a.name.split(".")[0], a.asname or a.name) for a in node.names]


def _with_comments(node: ast.stmt, lines: list[str]) -> str:
    """``node``'s source lines, decorators included, after the comment lines right above it."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    while first > 0 and lines[first - 1].startswith("#"):
        first -= 1
    return "\n".join(lines[first:node.end_lineno])


def library(module) -> Library:
    """``module``'s top-level definitions and imports. Raises ValueError for a statement that is neither (a
    library holds nothing else but its docstring) or for a name bound twice."""
    text = inspect.getsource(module)
    lines = text.split("\n")
    definitions, imports = {}, []
    for node in ast.parse(text).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports += [] if isinstance(node, ast.ImportFrom) and node.module == "__future__" else _imports(node, lines)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)):
            names = _bound(node)
            if len(names) != 1 or names[0] in definitions:
                raise ValueError(f"{module.__name__} line {node.lineno}: a library definition binds one new name")
            definitions[names[0]] = Definition(names[0], _with_comments(node, lines), node, reads(node))
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            raise ValueError(f"{module.__name__} line {node.lineno}: a library holds definitions and imports only")
    return Library(definitions, tuple(imports))


@functools.cache
def runtime_libraries() -> tuple[Library, Library, Library]:
    """The device helpers, the schedule functions and the host runtime, in that order. (Imported here, when the
    first module is emitted: decorating the device helpers costs a process that only loads modules from the
    disk cache some 20 ms.)"""
    from ..lower import schedule
    from . import device, host

    libraries = library(device), library(schedule), library(host)
    names = [name for lib in libraries for name in lib.definitions]
    if len(names) != len(set(names)):
        raise ValueError(f"runtime libraries define {sorted(n for n in names if names.count(n) > 1)} twice")
    return libraries


def reserved_names() -> set[str]:
    """Every name a definition or an import of a runtime library binds: code the module holds for the user
    (copied functions, their constants and imports) must be named otherwise."""
    names = set()
    for lib in runtime_libraries():
        names |= set(lib.definitions) | {i.binds for i in lib.imports}
    return names


def closure(read: frozenset[str]) -> list[list[Definition]]:
    """Per runtime library, the definitions that code reading ``read`` needs, each after every definition of
    its library that comes before it in source order."""
    libraries = runtime_libraries()
    wanted, pending = set(), list(read)
    while pending:
        name = pending.pop()
        for lib in libraries:
            if name in lib.definitions and name not in wanted:
                wanted.add(name)
                pending += lib.definitions[name].reads
    return [[d for name, d in lib.definitions.items() if name in wanted] for lib in libraries]


def imports_for(read: frozenset[str], written: list[str]) -> tuple[list[str], list[str]]:
    """The import lines of the runtime libraries that code reading ``read`` needs, less those in ``written``:
    (the standard library's, the others'), each once, in the libraries' order."""
    lines = dict.fromkeys(i.source for lib in runtime_libraries() for i in lib.imports
                          if i.path in read and i.source not in written)
    standard = [s for s in lines if _top_module(s) in sys.stdlib_module_names]
    return standard, [s for s in lines if s not in standard]


def _top_module(source: str) -> str:
    return source.split()[1].split(".")[0]
