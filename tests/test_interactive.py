"""Scalar functions written where no source file exists (docs/guide.md, "At an interactive prompt, in a notebook,
or from exec"): a def typed at ``python -i`` is a stage's function; a ``@triton.jit`` function typed there is
refused by Triton itself; one run by ``exec`` works once its text is registered in ``linecache``, as IPython and
Jupyter register every cell's."""
import linecache
import os
import select
import subprocess
import sys
import time

import pytest
import torch

import tricomb as tc

PROMPT_SESSION = b"""import torch, tricomb as tc
def doubled_exp(x):
    return tc.exp(x) * 2.0

print("RESULT", repr((tc.map(doubled_exp) >> tc.sum())(torch.linspace(-1, 1, 9)).item()))
import triton
@triton.jit
def plus_one(x):
    return x + 1

print("DONE")
"""

SOFTSIGN = """import triton
import triton.language as tl

@triton.jit
def softsign(x):
    return x / (1 + tl.abs(x))
"""


def _interactive(session: bytes, env: dict, timeout: float = 240) -> str:
    """What ``python -i`` prints, on a terminal (a pty, so that it prompts and reads as at a keyboard), for the
    lines of ``session``."""
    pty = pytest.importorskip("pty")
    pid, fd = pty.fork()
    if pid == 0:  # the child: an interactive interpreter on the pty
        os.execve(sys.executable, [sys.executable, "-i", "-q"], env)
    os.write(fd, session + b"exit()\n")
    out, deadline = b"", time.time() + timeout
    while time.time() < deadline:
        if select.select([fd], [], [], 1)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child exited: the pty is closed
                break
            if not chunk:
                break
            out += chunk
    os.waitpid(pid, 0)
    return out.decode(errors="replace")


@pytest.mark.subprocess
def test_a_def_typed_at_an_interactive_prompt_is_a_stage_function(tmp_path):
    """The def runs as traced, with torch's value; the jit function on the next lines gets Triton's own refusal
    (the guide says so, and what to do instead)."""
    env = {**os.environ, "TRICOMB_CACHE_DIR": str(tmp_path / "cache")}
    out = _interactive(PROMPT_SESSION, env)
    results = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert results, out[-3000:]
    want = (torch.exp(torch.linspace(-1, 1, 9)) * 2.0).sum().item()
    assert float(results[0].split()[1]) == pytest.approx(want, rel=1e-6)
    assert "@jit functions should be defined in a Python file" in out
    assert "DONE" in out.split("should be defined in a Python file", 1)[1]  # the session went on


def _exec_cell(source: str, name: str, register: bool) -> dict:
    if register:
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    scope: dict = {}
    exec(compile(source, name, "exec"), scope)
    return scope


def test_a_jit_function_run_by_exec_with_its_source_registered_is_inlined():
    name = "<tricomb test cell 1>"
    try:
        softsign = _exec_cell(SOFTSIGN, name, register=True)["softsign"]
        x = torch.linspace(-4, 4, 101)
        pipe = tc.map(softsign) >> tc.sum()
        assert "return x / (1 + tl.abs(x))" in pipe.source(x)
        torch.testing.assert_close(pipe(x), (x / (1 + x.abs())).sum())
    finally:
        linecache.cache.pop(name, None)


def test_a_jit_function_run_by_exec_without_its_source_is_refused_by_triton():
    with pytest.raises(ValueError, match="should be defined in a Python file"):
        _exec_cell(SOFTSIGN, "<tricomb test cell 2>", register=False)


@pytest.mark.subprocess
def test_a_def_in_a_script_read_from_stdin_is_a_stage_function(tmp_path):
    env = {**os.environ, "TRICOMB_CACHE_DIR": str(tmp_path / "cache")}
    script = PROMPT_SESSION.split(b"import triton\n")[0]
    done = subprocess.run([sys.executable, "-"], input=script, env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert b"RESULT" in done.stdout
