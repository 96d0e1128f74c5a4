"""Emitted modules of the golden pipelines (tests/golden/pipelines.py) equal their committed text, so that any
change to code generation is a reviewed diff. After an intended change: ``python tests/golden/refresh.py``."""
import difflib
import pathlib
import sys

import pytest

GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
sys.path.insert(0, str(GOLDEN))

import pipelines  # noqa: E402


@pytest.mark.parametrize("name", sorted(pipelines.CASES))
def test_emitted_module_matches_golden(name):
    expected = (GOLDEN / f"{name}.py.txt").read_text()
    got = pipelines.emitted(name)
    if got != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), got.splitlines(True),
                                            f"golden/{name}.py.txt", "emitted", n=2))
        pytest.fail(f"the emitted module of {name!r} changed; if intended, run python tests/golden/refresh.py "
                    f"and explain the diff in the commit:\n{diff[:6000]}")


def test_every_golden_file_has_a_pipeline():
    files = {p.name[:-len(".py.txt")] for p in GOLDEN.glob("*.py.txt")}
    assert files == set(pipelines.CASES)
