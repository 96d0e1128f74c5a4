"""The host runtime every emitted module copies (tricomb/codegen/host.py), tested as the Python it is: shapes,
offsets, layouts, scratch buffers, status words and the launcher, each on its own; and the kernel records of
tricomb/runtime/binaries.py read the attributes the real launcher has."""
import ast
import pathlib
import threading

import pytest
import torch
import triton

import tricomb as tc
from tricomb.codegen import host
from tricomb.runtime import binaries

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    """Each test sees the runtime's per-module state as a new module holds it."""
    for name in ("_TICKETS", "_STATUS_WORDS", "_NUM_SMS", "_TUNERS"):
        monkeypatch.setattr(host, name, {})


# --- shapes and offsets ------------------------------------------------------------------------------------

@pytest.mark.parametrize("shapes", [[()], [(3,)], [(), (4, 1)], [(3, 1), (1, 4)], [(2, 1, 5), (7, 1)],
                                    [(0,), (1,)], [(0, 3), (1, 3)], [(1,), (1, 1, 1)], [(5, 0), (5, 1)]])
def test_broadcast_is_torchs(shapes):
    assert host._broadcast(*shapes) == torch.broadcast_shapes(*shapes)
    assert isinstance(host._broadcast(*shapes), torch.Size)


@pytest.mark.parametrize("shapes", [[(3,), (4,)], [(2, 3), (3, 2)], [(0,), (2,)]])
def test_broadcast_refuses_what_torch_refuses(shapes):
    with pytest.raises(RuntimeError):
        torch.broadcast_shapes(*shapes)
    with pytest.raises(ValueError, match="do not broadcast"):
        host._broadcast(*shapes)


LIMIT = 2**31 - 1


@pytest.mark.parametrize("shape, strides, wide", [
    ((LIMIT,), [(1,)], False),  # the last index is 2**31 - 2
    ((LIMIT + 1,), [(1,)], True),  # more elements than int32 counts
    ((2,), [(LIMIT,)], False),  # the farthest offset is exactly 2**31 - 1
    ((2,), [(LIMIT + 1,)], True),
    ((2,), [(-(LIMIT + 1),)], True),  # a negative stride reaches as far
    ((3, 2), [(0, 1), (LIMIT // 2 + 1, 0)], True),  # any one tensor's offset decides
    ((0, 5), [(LIMIT * 4, 1)], False),  # nothing to index
    ((), [()], False),
])
def test_needs_int64_at_the_edges(shape, strides, wide):
    assert host._needs_int64(shape, strides) is wide


# --- layouts -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sizes, perm", [((3, 4), (0, 1)), ((4, 3), (1, 0)), ((2, 3, 4), (2, 0, 1)),
                                         ((2, 3, 4), (1, 2, 0)), ((2, 3, 4, 5), (3, 1, 0, 2))])
def test_empty_lays_out_results_as_torch_does_for_permuted_inputs(sizes, perm):
    """``order`` lists the dims outer to inner, as in a tensor made of ``sizes`` and permuted by ``perm``."""
    x = torch.empty(sizes).permute(perm)
    order = sorted(range(x.dim()), key=lambda d: -x.stride(d))
    made = host._empty(x.shape, order, torch.float16, CPU)
    assert made.shape == x.shape and made.dtype == torch.float16
    assert made.stride() == torch.exp(x).stride()


def test_empty_of_no_elements_has_the_shape():
    assert host._empty((0, 3), (1, 0), torch.int8, CPU).shape == (0, 3)
    assert host._empty((), (), torch.float32, CPU).shape == ()


def test_check_layout_takes_the_layout_class_and_refuses_others():
    shape, groups = (4, 1, 6), ((0,), (2,))
    host._check_layout(shape, [(6, 6, 1), (0, 0, 1)], groups)  # a size-1 dim outside every group
    with pytest.raises(ValueError, match="laid out differently"):
        host._check_layout((4, 2, 6), [(12, 6, 1)], groups)  # a dim outside the groups is not size 1
    host._check_layout((4, 6), [(6, 1)], ((0, 1),))  # one run in memory
    with pytest.raises(ValueError, match="laid out differently"):
        host._check_layout((4, 6), [(6, 1), (1, 4)], ((0, 1),))  # a transposed tensor breaks the run


def test_check_constant_refuses_an_input_that_varies_where_the_module_reads_it_once():
    shape, axes = (4, 6), (1,)
    host._check_constant(shape, axes, [((1, 0), "folded"), ((0, 1), "kept")])
    host._check_constant((1, 6), axes, [((6, 1), "kept")])  # one row: nothing to vary along
    with pytest.raises(ValueError, match="once along the folded axes"):
        host._check_constant(shape, axes, [((6, 1), "folded")])
    with pytest.raises(ValueError, match="once along the kept axes"):
        host._check_constant(shape, axes, [((6, 1), "kept")])


def test_a_module_reading_an_input_once_a_row_refuses_one_that_varies_along_the_row():
    """The module of ``(a, b) -> sum(a * b)`` for a ``(N, 1)`` b reads b once a row: launched on a ``(N, C)`` b
    of the same layout class it refuses rather than read b's first column alone."""
    import importlib.util
    import tempfile
    pipe = tc.zip_with(tc.mul) >> tc.sum(axis=-1)
    a, column = torch.randn(5, 8), torch.randn(5, 1)
    path = pathlib.Path(tempfile.mkdtemp()) / "emitted.py"
    path.write_text(pipe.source(a, column))
    spec = importlib.util.spec_from_file_location("emitted_row_input", path)
    module = importlib.util.module_from_spec(spec)
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = True  # (CPU tensors: the module's kernel as the interpreter's)
        spec.loader.exec_module(module)
    torch.testing.assert_close(module.launch(a, column), (a * column).sum(-1))
    with pytest.raises(ValueError, match="once along the folded axes"):
        module.launch(a, torch.randn(5, 8))


def test_check_inputs_names_the_input_and_what_it_should_be():
    host._check_inputs((torch.ones(3), torch.ones(2, 2, dtype=torch.int8)), (torch.float32, torch.int8), (1, 2))
    with pytest.raises(TypeError, match="input 1 must be a torch.int8 tensor of rank 2.*got torch.int8 of rank 1"):
        host._check_inputs((torch.ones(3), torch.ones(2, dtype=torch.int8)), (torch.float32, torch.int8), (1, 2))
    with pytest.raises(TypeError, match="input 0 must be a torch.float32 tensor of rank 1.*got float"):
        host._check_inputs((1.5,), (torch.float32,), (1,))


# --- scratch: tickets and status words ---------------------------------------------------------------------

def test_tickets_are_zero_kept_per_device_and_grow():
    first = host._tickets(CPU, 10)
    assert first.numel() == 64 and first.dtype == torch.int32 and not first.any()  # at least 64
    first[3] = 1
    assert host._tickets(CPU, 64) is first  # enough: the same tickets
    grown = host._tickets(CPU, 100)
    assert grown.numel() == 100 and not grown.any() and host._tickets(CPU, 50) is grown
    grown[0] = 5
    host._reset_tickets(CPU)
    assert not grown.any()
    host._reset_tickets(torch.device("meta"))  # a device without tickets: nothing to do


def test_status_words_count_launches_above_every_earlier_status():
    status = host._StatusWords(torch.zeros(8, dtype=torch.int64))
    readies = [status.next_ready() for _ in range(4)]
    assert readies == [4, 6, 8, 10]  # launch n: 2n + 2, above CAPTURED (2) and above launch n - 1's prefix
    assert all(r > host._StatusWords.CAPTURED for r in readies)
    assert host._StatusWords(None).next_ready() == 0  # a scan without the look-back


def test_status_words_are_zeroed_and_counted_again_at_the_last_count():
    status = host._StatusWords(torch.full((8,), 99, dtype=torch.int64))
    status.LAST = 3
    assert [status.next_ready() for _ in range(2)] == [4, 6]
    assert status.words.eq(99).all()  # not cleared before: larger statuses outrank old words
    assert status.next_ready() == 4 and not status.words.any()
    assert status.next_ready() == 6


def test_status_words_under_cuda_graph_capture_pass_the_captured_status(monkeypatch):
    """A captured launch zeroes its words (the fill is captured too) and passes CAPTURED, which its replays
    keep; the count is not advanced. (A stand-in for CUDA words: the rule, not CUDA, is tested.)"""
    class CudaWords:
        is_cuda, zeroed = True, 0

        def zero_(self):
            self.zeroed += 1

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    status = host._StatusWords(CudaWords())
    assert status.next_ready() == host._StatusWords.CAPTURED and status.words.zeroed == 1
    assert status.launches == 0


def test_status_words_of_launches_from_several_threads_are_distinct():
    status = host._StatusWords(torch.zeros(8, dtype=torch.int64))
    seen, lock = [], threading.Lock()

    def launch_many():
        mine = [status.next_ready() for _ in range(200)]
        with lock:
            seen.extend(mine)

    threads = [threading.Thread(target=launch_many) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == [2 * n + 2 for n in range(1, 1601)]


def test_status_words_are_kept_per_device_and_grow_without_freeing_the_old():
    small = host._status_words(CPU, 10)
    assert small.words.numel() == 64 and not small.words.any() and host._status_words(CPU, 64) is small
    large = host._status_words(CPU, 65)
    assert large is not small and large.words.numel() == 65
    assert host._STATUS_WORDS[CPU] == [small, large]  # launches prepared with the small ones still use them


# --- the tuner's switch and the launcher -------------------------------------------------------------------

def test_tuning_runs_only_on_the_gpu_for_large_launches_unless_turned_off(monkeypatch):
    monkeypatch.delenv("TRICOMB_AUTOTUNE", raising=False)
    assert host._tuning(False, 1 << 22, {})
    assert not host._tuning(False, (1 << 22) - 1, {})
    assert not host._tuning(True, 1 << 30, {})  # the interpreter
    assert not host._tuning(False, 1 << 30, {"BLOCK": 64})  # a schedule fixed by hand
    monkeypatch.setenv("TRICOMB_AUTOTUNE", "0")
    assert not host._tuning(False, 1 << 30, {})


def test_start_tuning_resets_the_progress_it_reports():
    host.TUNING["done"] = 7
    configs = [object(), object()]
    assert host._start_tuning(configs, {}) is configs
    assert (host.TUNING["done"], host.TUNING["total"]) == (0, 2)


class _Kernel:
    """Stands for a @triton.jit kernel: ``kernel[grid](*args, **meta)`` records its launches, or raises."""

    def __init__(self, error=None):
        self.launches, self.error = [], error

    def __getitem__(self, grid):
        def launch(*args, **meta):
            if self.error is not None:
                raise self.error
            self.launches.append((grid, args, meta))
        return launch


def test_launcher_passes_the_slots_then_the_fixed_arguments_then_the_status():
    kernel = _Kernel()
    status = host._StatusWords(torch.zeros(8, dtype=torch.int64))
    grid = lambda meta: (1,)  # noqa: E731
    launcher = host._Launcher(kernel, grid, (7, 8), {"BLOCK": 16}, CPU, status)
    launcher("a", "b")
    launcher("c", "d")
    assert kernel.launches == [(grid, ("a", "b", 4, 7, 8), {"BLOCK": 16}), (grid, ("c", "d", 6, 7, 8), {"BLOCK": 16})]
    assert launcher.compiled is None  # the interpreter compiles nothing to adopt


@pytest.mark.parametrize("error", [RuntimeError("launch failed"), KeyboardInterrupt()])
def test_a_launch_cut_off_resets_the_tickets_of_a_kernel_that_takes_them(error):
    reset = []
    launcher = host._Launcher(_Kernel(error), None, (), {}, CPU, None, reset.append)
    with pytest.raises(type(error)):
        launcher()
    assert reset == [CPU]
    with pytest.raises(type(error)):
        host._Launcher(_Kernel(error), None, (), {}, CPU)()  # no reset given: nothing to reset


def test_no_hooks_when_triton_has_none():
    assert host._no_hooks()


# --- the kernel records read the real launcher's attributes -------------------------------------------------

def _launcher_attributes_read(module) -> set[str]:
    """The attributes ``module``'s source reads off a variable named ``launcher``."""
    tree = ast.parse(pathlib.Path(module.__file__).read_text())
    return {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "launcher"}


def test_binaries_read_only_attributes_a_launcher_has():
    launcher = host._Launcher(_Kernel(), None, (), {}, CPU)
    read = _launcher_attributes_read(binaries)
    assert {"rest", "meta", "device", "fn", "compiled", "chosen", "adopt"} <= read
    assert all(hasattr(launcher, a) for a in read), sorted(a for a in read if not hasattr(launcher, a))


def test_a_record_digest_names_what_the_real_launcher_holds(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    module = type("Module", (), {"__name__": "tricomb_kernel_0123"})
    launcher = host._Launcher(_Kernel(), None, (torch.ones(2), 5, 1.5, None), {"BLOCK": 16}, CPU)
    digest = binaries._digest(module, launcher, ("key",))
    assert len(digest) == 32
    launcher.meta["BLOCK"] = 32
    assert binaries._digest(module, launcher, ("key",)) != digest
    launcher.rest = (object(),)  # an argument the store cannot describe: no record
    assert binaries._digest(module, launcher, ("key",)) is None
    binaries.keep(module, launcher, ("key",))  # nothing compiled: nothing recorded, nothing raised
