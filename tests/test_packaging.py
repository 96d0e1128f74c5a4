"""The grammar ships inside the wheel and loads from an installed wheel as from the source checkout."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_contains_the_grammar_and_parses_from_it(tmp_path):
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    wheel = next(tmp_path.glob("tricomb-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "tricomb/_grammar/tricomb.lark" in names
        archive.extractall(tmp_path / "site")
    check = ("import tricomb, tricomb.dsl.parser as p; "
             "assert '_grammar' in str(p.grammar_path()), p.grammar_path(); "
             "print(tricomb.parse('map softplus | sum'))")
    path = os.pathsep.join(p for p in [str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")] if p)
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "map softplus | sum"


def test_source_checkout_reads_grammar_from_the_top_level_folder():
    from tricomb.dsl.parser import grammar_path
    assert grammar_path() == ROOT / "grammar" / "tricomb.lark"
