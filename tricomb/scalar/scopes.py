"""Which binding each name written in a copied ``@triton.jit`` function means, by Python's own scoping rules.

:class:`Binder` walks a ``def`` once and records, for every scope (the def, nested defs, lambdas, classes and
comprehensions), the names it binds (parameters of every kind, every assignment form, ``for``/``with``/``except``
targets, ``:=``, imports, ``match`` captures) and those it declares ``global`` or ``nonlocal``. :class:`Analysis`
then answers, for any name node, which scope binds it, or that it is free in the def (a global, a closure cell
or a Python builtin): only free names are resolved and rewritten by :mod:`tricomb.scalar.inline`.
"""
from __future__ import annotations

import ast
import contextlib
from dataclasses import dataclass, field


@dataclass(eq=False)
class Scope:
    """One Python scope of a copied function: the names it binds and those it declares global or nonlocal.

    ``kind`` is ``"module"`` (where the copied ``def`` itself is evaluated: its defaults and annotations),
    ``"function"`` (the def, a nested def or a lambda), ``"class"`` or ``"comprehension"``."""

    kind: str
    parent: Scope | None = None
    bound: set[str] = field(default_factory=set)
    globals: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)

    def lookup(self, name: str) -> tuple[Scope | None, bool]:
        """The scope whose binding ``name`` means when written here, or None where it is free in the copied
        function (a global, a closure cell or a builtin); and whether a ``global`` statement made it global."""
        scope, own = self, True
        while scope.kind != "module":
            if scope.kind == "class" and not own:
                pass  # a class body's names are not seen from the scopes inside it
            elif name in scope.globals:
                return None, True
            elif name in scope.bound and name not in scope.nonlocals:
                return scope, False
            scope, own = scope.parent, False
        return None, False


@dataclass(eq=False)
class Occurrence:
    """A name written in the source: ``node.<attr>``, or its ``index``-th entry (``global``/``nonlocal``)."""

    node: ast.AST
    attr: str
    index: int | None
    scope: Scope  # the scope it is written in (for a := in a comprehension: the one it binds in)
    binds: bool

    @property
    def key(self) -> tuple:
        return id(self.node), self.attr, self.index

    @property
    def name(self) -> str:
        value = getattr(self.node, self.attr)
        if self.index is not None:
            return value[self.index]
        if isinstance(self.node, ast.alias) and self.attr == "name":
            return value.split(".")[0]  # import a.b binds a
        return value

    def rename(self, new: str) -> bool:
        """Write ``new`` in its place; False where no spelling binds it (``import a.b`` binds ``a`` only)."""
        if self.index is not None:
            getattr(self.node, self.attr)[self.index] = new
        elif isinstance(self.node, ast.alias) and self.attr == "name":
            if "." in self.node.name:
                return False
            self.node.asname = new
        else:
            setattr(self.node, self.attr, new)
        return True


def parameters(args: ast.arguments) -> list[ast.arg]:
    extra = [a for a in (args.vararg, args.kwarg) if a is not None]
    return args.posonlyargs + args.args + args.kwonlyargs + extra


class Binder(ast.NodeVisitor):
    """Records every name of a def with the scope it is written in, and what each scope binds: every binding
    form of Python, with what a def, lambda, class or comprehension evaluates in the scope around it
    (decorators, defaults, annotations, bases, the first iterable) visited there."""

    def __init__(self):
        self.scope = Scope("module")
        self.occurrences: list[Occurrence] = []

    def _record(self, node, attr: str, binds: bool, scope: Scope | None = None, index: int | None = None):
        occurrence = Occurrence(node, attr, index, scope or self.scope, binds)
        if binds:
            occurrence.scope.bound.add(occurrence.name)
        self.occurrences.append(occurrence)

    @contextlib.contextmanager
    def _inside(self, kind: str):
        outer = self.scope
        self.scope = Scope(kind, outer)
        try:
            yield
        finally:
            self.scope = outer

    def _visit_all(self, nodes) -> None:
        for node in nodes:
            if node is not None:
                self.visit(node)

    def top(self, node: ast.FunctionDef) -> None:
        """The copied def: its own name is replaced by the emitted one, so only its parameters bind."""
        self._visit_all(getattr(node, "type_params", []))
        self._signature(node.args, node.returns)
        self._body(node.args, node.body)

    def _signature(self, args: ast.arguments, returns) -> None:
        """What a def or lambda evaluates where it is written: defaults and annotations."""
        self._visit_all(args.defaults + args.kw_defaults + [a.annotation for a in parameters(args)] + [returns])

    def _body(self, args: ast.arguments, body) -> None:
        with self._inside("function"):
            for arg in parameters(args):
                self._record(arg, "arg", binds=True)
            self._visit_all(body if isinstance(body, list) else [body])

    def visit_FunctionDef(self, node) -> None:
        self._visit_all(node.decorator_list + getattr(node, "type_params", []))
        self._signature(node.args, node.returns)
        self._record(node, "name", binds=True)
        self._body(node.args, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._signature(node.args, None)
        self._body(node.args, node.body)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._visit_all(node.decorator_list + getattr(node, "type_params", []) + node.bases + node.keywords)
        self._record(node, "name", binds=True)
        with self._inside("class"):
            self._visit_all(node.body)

    def _comprehension(self, node, results: list) -> None:
        first = node.generators[0]
        self.visit(first.iter)  # evaluated where the comprehension is written
        with self._inside("comprehension"):
            for i, generator in enumerate(node.generators):
                if i:
                    self.visit(generator.iter)
                self.visit(generator.target)
                self._visit_all(generator.ifs)
            self._visit_all(results)

    def visit_ListComp(self, node) -> None:
        self._comprehension(node, [node.elt])

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node, [node.key, node.value])

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        scope = self.scope
        while scope.kind == "comprehension":  # := in a comprehension binds in the function around it
            scope = scope.parent
        self._record(node.target, "id", binds=True, scope=scope)

    def visit_Name(self, node: ast.Name) -> None:
        self._record(node, "id", binds=not isinstance(node.ctx, ast.Load))  # (del makes a name local too)

    def visit_Global(self, node: ast.Global) -> None:
        self.scope.globals.update(node.names)
        for i in range(len(node.names)):
            self._record(node, "names", binds=False, index=i)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.scope.nonlocals.update(node.names)
        for i in range(len(node.names)):
            self._record(node, "names", binds=False, index=i)

    def visit_Import(self, node) -> None:
        for alias in node.names:
            self._record(alias, "asname" if alias.asname else "name", binds=True)

    visit_ImportFrom = visit_Import

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self._visit_all([node.type])
        if node.name:
            self._record(node, "name", binds=True)
        self._visit_all(node.body)

    def visit_MatchAs(self, node) -> None:
        self._visit_all([node.pattern])
        if node.name:
            self._record(node, "name", binds=True)

    def visit_MatchStar(self, node) -> None:
        if node.name:
            self._record(node, "name", binds=True)

    def visit_MatchMapping(self, node) -> None:
        self._visit_all(node.keys + node.patterns)
        if node.rest:
            self._record(node, "rest", binds=True)


class Analysis:
    """The names of one copied def, each resolved by Python's scoping rules."""

    def __init__(self, node: ast.FunctionDef):
        binder = Binder()
        binder.top(node)
        self.occurrences = binder.occurrences
        self._resolved = {o.key: o.scope.lookup(o.name) for o in self.occurrences}

    def resolution(self, occurrence: Occurrence) -> tuple[Scope | None, bool]:
        """The scope whose binding ``occurrence`` means (None: free in the def), and whether declared global."""
        return self._resolved[occurrence.key]

    def free(self, node: ast.Name) -> tuple[bool, bool]:
        """Whether the name ``node`` is free in the def, and whether a ``global`` statement declares it."""
        scope, declared = self._resolved[(id(node), "id", None)]
        return scope is None, declared

    def values(self) -> set[str]:
        """The names bound anywhere inside the def (its parameters and locals, and those of its inner scopes)."""
        return {o.name for o in self.occurrences if o.binds}

    def written(self) -> set[str]:
        """Every name written in the def."""
        return {o.name for o in self.occurrences}


def dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]


def root_name(node: ast.expr) -> ast.Name:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def free_references(node: ast.AST, analysis: Analysis):
    """Each dotted name (``a``, ``a.b.c``, taken whole) whose first name is free in the def, in source order:
    ``(its outermost node, its names, whether a global statement declares the first)``."""
    for child in ast.iter_child_nodes(node):
        chain = dotted(child) if isinstance(child, (ast.Name, ast.Attribute)) else None
        if chain is None:
            yield from free_references(child, analysis)
        elif analysis.free(root_name(child))[0] and isinstance(root_name(child).ctx, ast.Load):
            yield child, tuple(chain), analysis.free(root_name(child))[1]


