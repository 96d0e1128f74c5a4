"""The machine code of a look-back scan, compiled for Hopper (sm_90, the H100 and H200) with no GPU present:
Triton's wheel ships the ptxas and cuobjdump it compiles with. A scan tile waits for memory once only if every
load of the tile is issued before any loaded value is used (bench/NOTES.md: P4 went from 0.697 to 0.608 ms)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton

import tricomb as tc

_BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"

_COMPILE = """
import importlib.util, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

spec = importlib.util.spec_from_file_location("scan", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
fn = module.kernel
constants = {"BLOCK_M": 1, "BLOCK_K": 8192, "LOOKBACK": True, "WINDOW": 16, "PUBLISH_PREFIX": True, "WIDE": False}
pointers = {"in0": "*fp32", "out": "*fp32", "flags": "*i64", "aggregates": "*i64", "prefixes": "*i64"}
constants.update({name: 1 for name in fn.arg_names if name.startswith("s_")})  # unit strides, as Triton specializes
signature = {name: "constexpr" if param.is_constexpr or name in constants else pointers.get(name, "i32")
             for name, param in zip(fn.arg_names, fn.params)}
aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
           if name in pointers or name in ("K", "n0")}  # 16-byte aligned tensors, sizes divisible by 16
kernel = triton.compile(ASTSource(fn, signature, constants, aligned), target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": 4})
open(sys.argv[2], "wb").write(kernel.asm["cubin"])
"""


def _sass(source: str, folder: Path) -> list[str]:
    """The SASS instructions of the module ``source``'s kernel, compiled for sm_90 outside Triton's interpreter."""
    module, cubin = folder / "scan.py", folder / "scan.cubin"
    module.write_text(source)
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    subprocess.run([sys.executable, "-c", _COMPILE, str(module), str(cubin)], env=env, check=True, timeout=600)
    dump = subprocess.run([str(_BIN / "cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    return [line.split(";")[0].strip() for line in dump.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]


@pytest.mark.skipif(not (_BIN / "ptxas").exists() or not (_BIN / "cuobjdump").exists(),
                    reason="needs the ptxas and cuobjdump of Triton's NVIDIA backend")
@pytest.mark.subprocess
def test_a_whole_look_back_tile_is_loaded_before_any_of_it_is_used(tmp_path):
    """`map exp | cumsum` over 8192-element tiles and 4 warps: each thread's 16 vector loads of 16 bytes come
    before the first `exp`. (With the mask on every load, ptxas issued half of them after the first values
    were used, and a tile waited for memory twice.)"""
    source = tc.parse("map exp | cumsum").source(torch.randn(1 << 16))
    code = _sass(source, tmp_path)
    loads = [i for i, ins in enumerate(code) if re.search(r"\bLDG\.E\.128\b", ins) and "STRONG" not in ins]
    first_exp = next(i for i, ins in enumerate(code) if "MUFU.EX2" in ins)
    early = [i for i in loads if i < first_exp]  # the whole tile's path and the masked path, one after the other
    assert len(early) >= 16, f"loads before the first exp at {early}; all tile loads at {loads}"
