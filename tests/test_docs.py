"""The docs stay true to the code: the builtin table is generated, and the DSL reference names the grammar's
keywords, shorthands and library pipelines."""
import re
from pathlib import Path

from tricomb.scalar.builtins import markdown_table

ROOT = Path(__file__).resolve().parent.parent


def test_builtin_table_is_current():
    assert (ROOT / "docs" / "builtins.md").read_text() == markdown_table(), \
        "regenerate: python -c 'from tricomb.scalar.builtins import markdown_table; print(markdown_table(), end=\"\")' > docs/builtins.md"


def test_dsl_reference_covers_the_grammar():
    grammar = (ROOT / "grammar" / "tricomb.lark").read_text()
    reference = (ROOT / "docs" / "dsl.md").read_text()
    shorthands = re.search(r"SHORTHAND\.2: /\((.*)\)\\b/", grammar).group(1).split("|")
    library = re.search(r"LIBRARY\.2: /\((.*)\)\\b/", grammar).group(1).split("|")
    keywords = re.findall(r"^_[A-Z_]+\.2: /(\w+)\\b/", grammar, flags=re.M)
    assert keywords == ["map", "zip_with", "reduce", "scan", "attach", "param"]
    for word in shorthands + library + keywords:
        assert re.search(rf"\b{word}\b", reference), f"docs/dsl.md does not mention {word!r}"


def test_readme_gives_two_commands_and_ci_runs_them_from_it():
    """.ci/run reads its commands from the README's "Two commands" section, so the section must hold exactly
    the install command (which runs the main job) and the test command."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```sh\n(.*?)\n```", section, re.S) == [
        'pip install torch==2.13.0 -e ".[test]" && tricomb run "map softplus | sum"', "python -m pytest -q"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert '"## Two commands"' in ci and 'suite oldest-triton 3.6.0 "triton==3.6.0"' in ci
