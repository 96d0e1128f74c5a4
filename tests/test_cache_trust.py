"""The disk cache as a trust boundary: what is read back runs only once verified, attacks on the directory
leave results right and run nothing, and a cache that cannot be used degrades to none (docs/reliability.md).

Each test gets its own cache directory and a process state as if new (no module in memory, no store opened),
so what it reads comes from disk. A planted payload writes a marker file when it runs; the marker must never
appear."""
import hashlib
import io
import json
import os
import pickle
import stat
import subprocess
import sys
import warnings

import pytest
import torch

import tricomb as tc
from tricomb.dsl import parser
from tricomb import store
from tricomb.runtime import loader


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache directory for this test; returns its path (created by tricomb on first use)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("TRICOMB_CACHE_DIR", str(root))
    _as_new_process()
    yield root
    _as_new_process()
    monkeypatch.delenv("TRICOMB_CACHE_DIR")
    store.forget()


def _as_new_process():
    """Forget what this process holds in memory, so that the next call reads the disk cache as a new one would."""
    store.forget()
    loader._LOADED.clear()
    parser._parser.cache_clear()


def _payload(marker) -> str:
    return f"open({str(marker)!r}, 'w').write('ran')\n"


X = torch.linspace(-3, 3, 100)


def _pipe():
    return tc.map(tc.softplus) >> tc.sum()


def _right(pipe=None) -> None:
    got = (pipe or _pipe())(X)
    torch.testing.assert_close(got, torch.nn.functional.softplus(X).sum(), rtol=1e-5, atol=1e-5)


def _run_fresh(pipe=None):
    """One call as a new process makes it, warnings recorded."""
    _as_new_process()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _right(pipe)
    return [w for w in caught if issubclass(w.category, tc.CacheWarning)]


def _module_files(root):
    return sorted((root / "modules").glob("tricomb_*.py"))


# -- what is read back is verified -------------------------------------------------------------------------------

@pytest.mark.parametrize("attack", ["edited", "replaced", "emptied"])
def test_a_module_that_does_not_hash_to_its_name_never_runs(cache, tmp_path, attack):
    marker = tmp_path / "marker"
    _right()
    (module,) = _module_files(cache)
    original = module.read_text()
    module.write_text({"edited": original + _payload(marker), "replaced": _payload(marker),
                       "emptied": ""}[attack])
    caught = _run_fresh()  # through the index entry, which names this module
    assert not marker.exists()
    assert any("does not match its hash" in str(w.message) for w in caught)
    assert module.read_text() == original  # rebuilt
    assert not _run_fresh()  # and trusted again, without a warning


def test_a_module_planted_under_a_computed_name_with_a_forged_index_entry_never_runs(cache, tmp_path):
    """The attacker writes a payload under the name its own hash gives, and an index entry (under the digest
    tricomb would look up) naming it: without the directory's key the entry's seal cannot be made."""
    marker = tmp_path / "marker"
    _right()
    (entry,) = (cache / "index").iterdir()
    payload = _payload(marker)
    name = loader.module_name(payload)
    (cache / "modules" / f"{name}.py").write_text(payload)
    forged = {"key": entry.name, "module": name, "mode": "interpreted",
              "sha256": hashlib.sha256(payload.encode()).hexdigest()}
    content = json.dumps(forged).encode()
    wrong_key = store.Store(cache, "private", key=b"k" * 32)
    entry.write_bytes(wrong_key.sealed("index", entry.name, content))
    caught = _run_fresh()
    assert not marker.exists()
    assert any("seal does not hold" in str(w.message) for w in caught)


@pytest.mark.parametrize("module", ["/tmp/evil", "../modules/tricomb_0", "modules/x", "tricomb_zz", 7, None])
def test_an_index_entry_names_its_module_by_name_alone(cache, tmp_path, module):
    """Even an entry sealed with the right key (as by the user's own earlier tricomb) cannot point outside
    ``modules/`` or at a name that is not a module's hash."""
    marker = tmp_path / "evil.py"
    marker.write_text(_payload(tmp_path / "marker"))
    _right()
    (entry,) = (cache / "index").iterdir()
    kept = store.store()
    record = json.loads(kept.read_sealed("index", entry.name))
    record["module"] = module if module != "/tmp/evil" else str(marker)[:-3]
    entry.write_bytes(kept.sealed("index", entry.name, json.dumps(record).encode()))
    _run_fresh()
    assert not (tmp_path / "marker").exists()


def _exp_sum():
    return tc.map(tc.exp) >> tc.sum()


def test_swapped_index_entries_are_refused_and_each_pipeline_runs_its_own_kernel(cache):
    _exp_sum()(X)
    first = set((cache / "index").iterdir())
    _pipe()(X)
    (a,) = first
    (b,) = set((cache / "index").iterdir()) - first
    a_bytes, b_bytes = a.read_bytes(), b.read_bytes()
    a.write_bytes(b_bytes)
    b.write_bytes(a_bytes)
    _as_new_process()
    with pytest.warns(tc.CacheWarning, match="seal does not hold"):
        torch.testing.assert_close(_exp_sum()(X), X.exp().sum(), rtol=1e-5, atol=1e-5)
    with pytest.warns(tc.CacheWarning, match="seal does not hold"):
        _right()


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def test_the_parser_tables_are_unpickled_only_when_their_seal_holds(cache, tmp_path):
    marker = tmp_path / "marker"
    assert tc.parse("map exp | sum") is not None
    (tables,) = (cache / "grammar").iterdir()
    content = tables.read_bytes()
    head, _, _ = content.partition(b"\n")
    tables.write_bytes(head + b"\n" + pickle.dumps(_Payload(marker)))  # a payload behind the old seal
    _as_new_process()
    with pytest.warns(tc.CacheWarning, match="seal does not hold"):
        pipe = tc.parse("map softplus | sum")
    assert not marker.exists()
    _right(pipe)
    _as_new_process()
    with warnings.catch_warnings():
        warnings.simplefilter("error", tc.CacheWarning)
        tc.parse("map exp | sum")  # the tables were written anew, and load


def test_a_junk_index_entry_is_removed_and_rebuilt(cache):
    _right()
    (entry,) = (cache / "index").iterdir()
    entry.write_bytes(b"\x00junk")
    assert _run_fresh()
    assert not _run_fresh()


# -- links, owners, modes ---------------------------------------------------------------------------------------

def test_a_symlink_in_place_of_an_entry_is_removed_and_its_target_left_alone(cache, tmp_path):
    unrelated = tmp_path / "unrelated.txt"
    unrelated.write_text("keep me")
    tc.parse("map exp | sum")
    (tables,) = (cache / "grammar").iterdir()
    tables.unlink()
    tables.symlink_to(unrelated)
    _as_new_process()
    with pytest.warns(tc.CacheWarning, match="cannot be opened safely"):
        tc.parse("map exp | sum")
    assert unrelated.read_text() == "keep me"
    assert not tables.is_symlink() and tables.is_file()


def test_a_symlinked_folder_inside_the_cache_is_never_followed(cache, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _right()
    for folder in ("index", "modules"):
        for entry in (cache / folder).iterdir():
            entry.unlink()
        (cache / folder).rmdir()
        (cache / folder).symlink_to(elsewhere)
    with pytest.warns(tc.CacheWarning, match="symbolic link"):
        _as_new_process()
        _right()
    assert list(elsewhere.iterdir()) == []
    assert (cache / "index").is_dir() and not (cache / "index").is_symlink()


def _fallback_used(caught) -> bool:
    return any("this process uses its own private directory" in str(w.message) for w in caught)


def test_a_cache_directory_others_can_write_is_refused_for_a_private_one(cache, tmp_path):
    marker = tmp_path / "marker"
    _right()
    (module,) = _module_files(cache)
    os.chmod(cache, 0o777)
    module.write_text(_payload(marker))
    caught = _run_fresh()
    assert _fallback_used(caught) and not marker.exists()
    kept = store.store()
    assert kept.state == "fallback" and kept.root != cache
    assert stat.S_IMODE(os.stat(kept.root).st_mode) == 0o700


def test_a_cache_directory_another_user_owns_is_refused(cache, monkeypatch):
    _right()
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)
    caught = _run_fresh()
    assert _fallback_used(caught)
    assert "owned by another user" in store.store().reason


def test_an_entry_others_can_write_is_removed_and_rebuilt(cache, tmp_path):
    _right()
    (module,) = _module_files(cache)
    os.chmod(module, 0o666)
    caught = _run_fresh()
    assert any("can be written by other users" in str(w.message) for w in caught)
    assert stat.S_IMODE(os.stat(module).st_mode) == 0o600


def test_the_cache_is_made_private_and_its_entries_whole(cache):
    _right()
    tc.parse("map exp | sum")
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    for path in cache.rglob("*"):
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), path
        assert not path.name.startswith(".tmp"), path


# -- degrading ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["/proc/tricomb-cache", "a file"])
def test_a_location_that_cannot_be_made_turns_the_disk_cache_off_with_one_warning(tmp_path, monkeypatch, where):
    if where == "a file":
        (tmp_path / "file").write_text("")
        where = str(tmp_path / "file" / "cache")
    monkeypatch.setenv("TRICOMB_CACHE_DIR", where)
    _as_new_process()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pipe = tc.parse("map softplus | sum")
            _right(pipe)
            _right(tc.map(tc.exp) >> tc.map(tc.log) >> _pipe())
        assert [str(w.message).count("is off for this process") for w in caught] == [1]
        assert store.store().state == "off"
    finally:
        monkeypatch.delenv("TRICOMB_CACHE_DIR")
        _as_new_process()


def test_a_full_disk_turns_the_cache_off_and_leaves_no_temporary_file(cache, monkeypatch):
    import errno
    tc.parse("map exp | sum")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _right()
        torch.testing.assert_close((tc.map(tc.exp) >> tc.sum())(X), X.exp().sum(), rtol=1e-5, atol=1e-5)
    assert len([w for w in caught if "No space left" in str(w.message)]) == 1
    assert not [p for p in cache.rglob("*") if p.name.startswith(".tmp")]
    assert not (cache / "modules").exists()


# -- bounds ------------------------------------------------------------------------------------------------------

def test_the_disk_cache_evicts_the_least_recently_used_entries_past_its_limit(cache, monkeypatch):
    def pipe(k: int):  # a new object each time: nothing kept in memory
        return tc.map(lambda v: v * (k + 2.0)) >> tc.sum()
    pipe(0)(X)
    size = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file() and p.name != "key")
    monkeypatch.setattr(store, "max_bytes", lambda: int(size * 3.5))
    for k in range(1, 7):
        _as_new_process()
        pipe(0)(X)  # used the most recently each time: stays
        pipe(k)(X)
    used = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file() and p.name != "key")
    assert used <= size * 3.5
    kept = {json.loads(store.store().read_sealed("index", e.name))["module"] for e in (cache / "index").iterdir()}
    assert loader.module_name(pipe(0).source(X)) in kept
    assert loader.module_name(pipe(1).source(X)) not in kept


def test_memory_caches_are_bounded_least_recently_used_first():
    from tricomb.runtime.lru import LRU
    cache = LRU(3)
    for k in "abc":
        cache[k] = k
    assert cache.get("a") == "a"  # a is now the most recent
    cache["d"] = "d"
    assert list(cache) == ["c", "a", "d"]
    pipe = tc.map(tc.exp)
    for n in range(1, 70):
        pipe(torch.zeros(n))
    assert len(pipe._cache.entries()) <= 64 and len(loader._LOADED) <= 256


def test_cache_info_and_clear(cache):
    from contextlib import redirect_stdout
    from tricomb.cli import main
    from tricomb.commands import cache as command
    _right()
    rows = dict(command.info())
    assert rows["location"] == str(cache) and rows["state"].startswith("in use")
    assert rows["modules"].startswith("1 entries") and rows["index"].startswith("1 entries")
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["cache", "info"]) == 0
    with redirect_stdout(out):
        assert main(["cache", "clear"]) == 0
    assert "removed" in out.getvalue()
    assert not _module_files(cache) and not list((cache / "index").iterdir())
    assert (cache / "key").exists()
    assert not _run_fresh()  # works after a clear


@pytest.mark.subprocess
def test_a_planted_module_does_not_run_in_a_new_process(tmp_path):
    """The realistic path: one process fills the cache, the module is replaced, a new process calls again."""
    marker = tmp_path / "marker"
    env = {**os.environ, "TRICOMB_CACHE_DIR": str(tmp_path / "cache")}
    script = ("import torch, tricomb as tc\nx = torch.linspace(-3, 3, 100)\n"
              "got = tc.parse('map softplus | sum')(x)\n"
              "assert torch.allclose(got, torch.nn.functional.softplus(x).sum(), rtol=1e-5)\n")
    run = [sys.executable, "-W", "always", "-c", script]
    assert subprocess.run(run, env=env, capture_output=True, timeout=300).returncode == 0
    (module,) = (tmp_path / "cache" / "modules").glob("tricomb_*.py")
    module.write_text(_payload(marker))
    second = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert "CacheWarning" in second.stderr and "Traceback" not in second.stderr
    assert not marker.exists()


@pytest.mark.parametrize("limit", ["1G", "-5", "0.5", "\u00b2"])
def test_a_size_limit_that_is_not_a_number_is_refused_before_anything_runs(cache, monkeypatch, limit):
    monkeypatch.setenv("TRICOMB_CACHE_MAX_MB", limit)
    with pytest.raises(tc.ArgumentError, match="TRICOMB_CACHE_MAX_MB=.* must be a whole number of mebibytes"):
        _pipe()(X)
    assert not cache.exists()
    monkeypatch.setenv("TRICOMB_CACHE_MAX_MB", "64")
    _right()


def test_a_cache_directory_under_home_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TRICOMB_CACHE_DIR", "~/tc")
    monkeypatch.chdir(tmp_path)
    try:
        assert store.requested_dir() == tmp_path / "tc"
    finally:
        monkeypatch.delenv("TRICOMB_CACHE_DIR")


def test_clear_removes_an_older_layout_and_refuses_a_cache_not_in_use(cache, tmp_path, monkeypatch):
    from tricomb.cli import main
    _right()
    legacy = [cache / "tricomb_0123abcd.py", cache / "grammar-lark1.2.2.cache"]
    for path in legacy:
        path.write_text("old")
    assert main(["cache", "clear"]) == 0
    assert not any(p.exists() for p in legacy) and (cache / "key").exists()
    os.chmod(cache, 0o777)
    _as_new_process()
    with pytest.warns(tc.CacheWarning):
        assert main(["cache", "clear"]) == 2
