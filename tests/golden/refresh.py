"""Rewrite the golden emitted modules (``tests/golden/<name>.py.txt``) from the current code generator.

    python tests/golden/refresh.py            # rewrite every golden file
    python tests/golden/refresh.py --check    # exit 1, listing the stale ones, without writing

Run it after an intended change to code generation, then read ``git diff tests/golden`` and say in the commit
why the kernel text changed.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pipelines  # noqa: E402  (beside this script, not a package)


def golden_path(name: str) -> pathlib.Path:
    return HERE / f"{name}.py.txt"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list stale golden files and exit 1; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for name in pipelines.CASES:
        text = pipelines.emitted(name)
        path = golden_path(name)
        if not path.exists() or path.read_text() != text:
            stale.append(name)
            if not args.check:
                path.write_text(text)
    for path in HERE.glob("*.py.txt"):
        if path.name[:-len(".py.txt")] not in pipelines.CASES:
            stale.append(path.name)
            if not args.check:
                path.unlink()
    verb = "stale" if args.check else "rewritten"
    print(f"{len(stale)} golden file(s) {verb}" + (": " + ", ".join(stale) if stale else ""))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
