"""An emitted module holds only what its plan uses, and tricomb holds no code in string literals.

The runtime (host helpers, device helpers, schedules) is real Python that a module copies by reference closure
(tricomb/codegen/sources.py): a module of one plan kind carries none of another kind's machinery, and every
definition it holds is read by something else in it."""
import ast
import pathlib
import re

import pytest
import torch
import triton
from triton.language.extra import libdevice

import tricomb as tc
from tricomb.codegen import sources

ROOT = pathlib.Path(__file__).resolve().parent.parent

LOOK_BACK = {"_StatusWords", "_status_words", "_STATUS_WORDS", "tc_put_status16", "tc_get_status16", "threading"}
TICKETS = {"_tickets", "_TICKETS", "_reset_tickets"}


def _module(pipe, *inputs) -> tuple[str, set[str]]:
    """The module's source and the names its top level binds (imports included)."""
    source = pipe.source(*inputs)
    bound = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Assign):
            bound |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return source, bound


CASES = {  # name -> (pipeline, inputs, most lines; the plan's machinery it must not hold)
    "map exp": (lambda: tc.map(tc.exp), (torch.ones(1000),), 310, LOOK_BACK | TICKETS | {"_num_sms", "tc_last"}),
    "sum": (lambda: tc.reduce(tc.add, axis=0), (torch.ones(64, 128),), 420, LOOK_BACK),
    "argmax": (lambda: tc.parse("argmax(axis=1)"), (torch.ones(64, 128),), 460, LOOK_BACK),
    "cumsum": (lambda: tc.parse("cumsum"), (torch.ones(1 << 16),), 520, TICKETS),
    "cummax": (lambda: tc.parse("cummax(reverse=True)"), (torch.ones(64, 128),), 560, TICKETS),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_module_holds_no_machinery_its_plan_does_not_use(name):
    make, inputs, most, absent = CASES[name]
    source, bound = _module(make(), *inputs)
    assert len(source.splitlines()) <= most
    assert not bound & absent


def test_a_scan_holds_the_look_back_it_uses():
    """The positive side of the bounds above: a scan fused with a reduce holds tickets and status words; a
    scan of pairs, whose look-back packs them into 16-byte status words, their helpers."""
    _, bound = _module(tc.parse("scan maximum | zip_with sub | max"), torch.ones(4096), torch.ones(4096))
    assert TICKETS | {"_StatusWords", "_status_words", "_STATUS_WORDS", "threading"} <= bound
    _, bound = _module(tc.library.linear_recurrence(), torch.ones(4096), torch.ones(4096))
    assert {"tc_put_status16", "tc_get_status16"} <= bound and not bound & TICKETS


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_copied_definition_is_read_in_the_module(name):
    """Nothing is copied that nothing reads: each top-level definition but ``launch`` is read by another part."""
    make, inputs, _, _ = CASES[name]
    tree = ast.parse(make().source(*inputs))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign)) and getattr(node, "name", "") != "launch":
            name = node.name if hasattr(node, "name") else node.targets[0].id
            others = set().union(*(sources.reads(n) for n in tree.body if n is not node))
            assert name in others, f"{name} is copied but nothing reads it"


@triton.jit
def tc_log1p(x):
    # named like a device helper, and reading libdevice, which the helpers import too
    return libdevice.log1p(x)


def test_user_code_named_like_a_runtime_definition_is_renamed():
    """The names of the runtime libraries are reserved whether or not the module copies them: a user function
    named like a helper, and its import named like a helper's, are renamed, and each name is bound once."""
    source = (tc.map(tc_log1p) >> tc.map(tc.log1p)).source(torch.ones(8))
    bound = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound += [a.asname or a.name.split(".")[0] for a in node.names]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.append(node.name)
    assert bound.count("tc_log1p") == 1 and bound.count("libdevice") == 1
    assert "def tc_log1p(x):\n    if TC_COMPILED:" in source  # the helper, not the user's function
    assert {"_Launcher", "tc_wrap", "TC_COMPILED", "schedule_scan", "os"} <= sources.reserved_names()


# --- no code in string literals ----------------------------------------------------------------------------

def _literal_text(node) -> str:
    """A string constant's text, or an f-string's, with each replacement field (``{kind}`` of a format template
    too) as the name ``x``."""
    text = node.value if isinstance(node, ast.Constant) else "".join(
        v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
    return re.sub(r"\{[^{}]*\}", "x", text)


def _is_code(line: str) -> bool:
    """Whether ``line`` reads as a Python statement (a block header with its body to come counts), other than
    a lone name or constant (a message's replacement field alone on its line)."""
    line = line.strip()
    rest = "\n    pass" if line.endswith(":") else "\ndef f():\n    pass" if line.startswith("@") else ""
    try:
        body = ast.parse(line + rest).body
    except SyntaxError:
        return False
    return bool(body) and not (isinstance(body[0], ast.Expr) and isinstance(body[0].value, (ast.Name, ast.Constant)))


def code_in_strings(root: pathlib.Path) -> list[tuple[str, int]]:
    """(file, line) of each string literal under ``root/tricomb`` holding more than one line of code: not a bare
    string statement (a docstring, also of an attribute), with more than one line that reads as a statement."""
    found = []
    for path in sorted((root / "tricomb").rglob("*.py")):
        tree = ast.parse(path.read_text())
        statements = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        inner = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            literal = isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, str)
            if literal and id(node) not in statements | inner:
                if sum(_is_code(line) for line in _literal_text(node).split("\n")) > 1:
                    found.append((str(path.relative_to(root)), node.lineno))
    return found


def test_no_string_literal_in_tricomb_holds_more_than_one_line_of_code():
    found = code_in_strings(ROOT)
    assert not found, f"code held in string literals (write it as Python and copy it): {found}"


def test_every_helper_the_op_table_names_is_a_device_helper():
    """The op table names helpers by name (its ``helpers`` and the calls in its renderings, of scalar ops and of
    operators on tuples): each is a definition of tricomb/codegen/device.py."""
    from tricomb.scalar.builtins import OPS, TUPLE_OPS
    device, _, _ = sources.runtime_libraries()
    named = set()
    for spec in OPS.values():
        named |= set(spec.helpers)
        for rendering in (spec.triton, spec.integer, spec.tile_reduce, spec.tile_scan):
            named |= set(re.findall(r"\b(tc_\w+)\(", rendering or ""))
    for spec in TUPLE_OPS.values():
        named |= set(spec.helpers)
        for rendering in (spec.combine, spec.tile_reduce):
            named |= set(re.findall(r"\b(tc_\w+)\(", rendering or ""))
    assert named and named <= set(device.definitions), sorted(named - set(device.definitions))
