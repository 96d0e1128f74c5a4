"""Layers point down only (DESIGN.md, "Layout"): every import of a tricomb module, at the top of a module or
inside a function, goes to the importer's own layer or one below it; and the torch oracle imports nothing of
the compiler, so it cannot agree with a kernel by running one.

Found by reading the source with ``ast``, never by importing it: importing any tricomb module runs
``tricomb/__init__.py``, which loads every layer, so the rules are about what each module's own code imports.
"""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tricomb"

# The layers, lowest first; each holds names of tricomb/'s top level (a subpackage, or a module without .py).
# testing/ sits with the front ends: it runs pipelines under test (assertions.py calls pipe(*inputs), strategies
# builds them with the api), and its oracle part is held lower by ORACLE below.
LAYERS = [
    ("foundation", {"errors", "_version", "store", "serial"}),
    ("scalar", {"scalar"}),
    ("pipeline", {"pipeline"}),
    ("lower", {"lower"}),
    ("codegen", {"codegen"}),
    ("compiler", {"compiler"}),  # the pass list: lower and codegen, in order
    ("autograd", {"autograd"}),  # backward pipelines: stage IR to stage IR, run by the runtime's operator
    ("runtime", {"runtime"}),
    ("api", {"api", "library", "library_backward", "__init__", "dsl", "cli", "commands", "testing", "__main__"}),
    ("distributed", {"distributed"}),  # pipelines over shards: the api's pipelines plus torch.distributed's gathers
]

# The torch oracle: every tricomb module these import (transitively, but for each other) is in these layers.
ORACLE = {"tricomb.testing.reference", "tricomb.pipeline.evaluate", "tricomb.pipeline.jit_apply"}
ORACLE_LAYERS = {"foundation", "scalar", "pipeline"}

# (importer, imported) pairs that point up, each with the reason it stays and who removes it. None today.
ALLOWED: dict[tuple[str, str], str] = {}


def module_name(path: Path, package: Path) -> str:
    """``tricomb.a.b`` for ``tricomb/a/b.py`` (and for ``tricomb/a/b/__init__.py``)."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of ``package``, by dotted name."""
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def layer(name: str) -> str | None:
    """The layer of the tricomb module ``name``, or None where the table has no place for it."""
    parts = name.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    return next((layer for layer, tops in LAYERS if top in tops), None)


def _rank(name: str) -> int:
    return [layer for layer, _ in LAYERS].index(layer(name))


def imports(name: str, source: str, known: set[str]) -> list[tuple[str, int]]:
    """The tricomb modules that module ``name`` (whose text is ``source``) imports anywhere in its code, with
    their lines: ``from x import y`` imports module ``x.y`` where ``known`` has it, else ``x``; relative imports
    are resolved from ``name``'s package (``name`` itself for a package's ``__init__``, which ``known`` tells)."""
    package = name if any(k.startswith(name + ".") for k in known) else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found += [(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base, node.lineno) for a in node.names]
    return [(target, line) for target, line in found if target.split(".")[0] == "tricomb"]


def _graph() -> dict[str, list[tuple[str, int]]]:
    found = modules()
    return {name: imports(name, path.read_text(), set(found)) for name, path in found.items()}


def test_every_module_has_a_layer():
    """A new top-level module or subpackage of tricomb/ is given its place in LAYERS."""
    assert [name for name in modules() if layer(name) is None] == []


def test_imports_point_down_only():
    upward = [f"{name}:{line} imports {target} ({layer(name)} -> {layer(target)})"
              for name, targets in _graph().items() for target, line in targets
              if _rank(target) > _rank(name) and (name, target) not in ALLOWED]
    assert upward == [], "imports that point up a layer:\n" + "\n".join(upward)


def test_every_allowed_upward_import_still_exists():
    graph = _graph()
    stale = [pair for pair in ALLOWED if pair[1] not in {t for t, _ in graph.get(pair[0], [])}]
    assert stale == []


def test_the_oracle_imports_nothing_of_the_compiler():
    """The torch oracle reaches no kernel planning, code generation, runtime or api, directly or through what it
    imports: a user @triton.jit function is run by the oracle's own fixed kernel, not compiled by tricomb."""
    graph, seen = _graph(), {}
    pending = [(name, name) for name in sorted(ORACLE)]
    while pending:
        name, via = pending.pop()
        allowed = name in ORACLE or layer(name) in ORACLE_LAYERS
        if name not in seen:
            seen[name] = via
            pending += [(target, f"{via} -> {target}") for target, _ in graph.get(name, []) if allowed]
    reached = sorted(via for name, via in seen.items() if name not in ORACLE and layer(name) not in ORACLE_LAYERS)
    assert reached == [], "the oracle reaches the compiler:\n" + "\n".join(reached)


def test_imports_are_found_inside_functions_and_relative_to_the_package():
    """The scan itself: a function's import, ``from .. import store`` (a module) and ``from ..x import y`` (a
    name), an absolute import, and an ``__init__``'s relative import; nothing outside tricomb."""
    known = {"tricomb", "tricomb.store", "tricomb.pipeline", "tricomb.pipeline.evaluate", "tricomb.api",
             "tricomb.lower", "tricomb.lower.fuse"}
    source = ("import torch\nfrom .. import store\n\n\ndef f():\n    from ..api import Pipeline\n"
              "    import tricomb.lower.fuse\n    from . import evaluate\n")
    assert imports("tricomb.pipeline.evaluate", source, known) == [
        ("tricomb.store", 2), ("tricomb.api", 6), ("tricomb.lower.fuse", 7), ("tricomb.pipeline.evaluate", 8)]
    assert imports("tricomb.pipeline", "from .evaluate import x\n", known) == [("tricomb.pipeline.evaluate", 1)]
    assert _rank("tricomb.api") > _rank("tricomb.pipeline.evaluate") > _rank("tricomb.store")
