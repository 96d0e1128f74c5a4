"""The disk cache: one private directory, from which tricomb reads back only what it can verify.

Everything tricomb keeps across processes goes through this module: emitted modules (``modules/``), the index
from a pipeline and input layout to its module (``index/``), compiled kernels (``binaries/``) and the DSL's
parser tables (``grammar/``). The directory is ``$TRICOMB_CACHE_DIR``, or ``~/.cache/tricomb``.

What is trusted, and why:

- **The directory.** It is created 0700. One that another user owns, or that group or others can write, is
  refused with a :class:`~tricomb.errors.CacheWarning`, and a private directory made for this process (and
  removed at exit) is used instead. A location that cannot be created or written (read-only, full) turns the
  disk cache off for the process, with one warning: every call still works, from memory.
- **Entries.** Each is opened without following symlinks and must be a regular file that this user owns and
  nobody else can write. Content-addressed entries (a module) must hash to their name. Every other entry is
  *sealed*: it carries an HMAC-SHA256 (RFC 2104), under a key kept in the directory (``key``, 0600), of its
  kind, its name and its content. A sealed entry therefore cannot be planted, edited, or moved to another name
  (a swapped index entry fails its seal) by anyone who cannot read the key; and nothing is unpickled before its
  seal holds.
- **Damage.** An entry that fails a check is removed with a warning and rebuilt by the caller; it never
  raises.
- **Writes.** A write goes to a fresh temporary file (``O_EXCL``, never through a symlink), is flushed to disk
  (``fsync``), then renamed into place, and the directory is flushed: a reader sees a whole entry or none. A
  failed write removes its temporary file.
- **Size.** The directory is kept under ``$TRICOMB_CACHE_MAX_MB`` megabytes (default 1024): past it, the
  entries used least recently (reading one touches it) are removed until a quarter of the limit is free.
"""
from __future__ import annotations

import atexit
import errno
import hashlib
import hmac
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ArgumentError, CacheWarning

KINDS = ("modules", "index", "binaries", "grammar")
_LEGACY = re.compile(r"tricomb_[0-9a-f]+\.py|grammar-lark.*\.cache|\.tmp_.*")  # an older layout's files
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # an entry's name: no separator, no "..", no dotfile
_SEAL = b"tricomb-seal-v1 "
_KEY_BYTES = 32
_DEFAULT_MAX_MB = 1024
_STALE_SECONDS = 3600  # a temporary file older than this was left by a process that died writing it
_LOCK = threading.RLock()
_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """A CacheWarning, once per process for each message, attributed to the user's call into tricomb."""
    with _LOCK:
        if message in _WARNED:
            return
        _WARNED.add(message)
    warnings.warn(message, CacheWarning, stacklevel=_user_frame())


def _user_frame() -> int:
    """How many frames up the innermost caller outside tricomb (and lark) is, for ``warnings.warn``."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame, level = sys._getframe(2), 2
    while frame is not None and (os.path.abspath(frame.f_code.co_filename).startswith(package)
                                 or frame.f_globals.get("__name__", "").split(".")[0] == "lark"):
        frame, level = frame.f_back, level + 1
    return level


def _problem(info: os.stat_result, what: str) -> str | None:
    """Why a file or directory of this ``lstat`` cannot be trusted, or None."""
    if stat.S_ISLNK(info.st_mode):
        return f"{what} is a symbolic link"
    if info.st_uid != os.geteuid():
        return f"{what} is owned by another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} can be written by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def max_bytes() -> int:
    """The disk cache's size limit in bytes, from ``$TRICOMB_CACHE_MAX_MB`` (default 1024). Raises ArgumentError
    for a value that is not a whole number of megabytes."""
    text = os.environ.get("TRICOMB_CACHE_MAX_MB", "").strip()
    if not text:
        return _DEFAULT_MAX_MB << 20
    if not (text.isascii() and text.isdigit()):
        raise ArgumentError(f"TRICOMB_CACHE_MAX_MB={text!r} must be a whole number of mebibytes, 0 or more (the disk "
                            f"cache's size limit; default {_DEFAULT_MAX_MB}; 0 keeps nothing on disk)")
    return int(text) << 20


@dataclass
class Store:
    """One cache directory (or none: ``root`` None keeps nothing on disk) and the key its seals use."""

    root: Path | None
    state: str  # "private" (the directory asked for), "fallback" (this process's own), or "off"
    reason: str = ""
    key: bytes = b""
    _used: int | None = field(default=None, repr=False)  # bytes on disk, counted at the first write
    _checked: set = field(default_factory=set, repr=False)  # kinds whose folder was found trustworthy

    @property
    def enabled(self) -> bool:
        return self.root is not None

    # -- reading ---------------------------------------------------------------------------------------------

    def path(self, kind: str, *parts: str) -> Path:
        """Where entry ``parts`` of ``kind`` lives (a file, or a file in an entry's folder). Raises ValueError
        for a part that is not a plain file name."""
        if kind not in KINDS or not parts or not all(_NAME.fullmatch(p) and ".." not in p for p in parts):
            raise ValueError(f"not a cache entry name: {kind}/{'/'.join(parts)!r}")
        return self.root.joinpath(kind, *parts)

    def read(self, kind: str, *parts: str) -> bytes | None:
        """The bytes of an entry's file, or None when it is absent or cannot be trusted (then the entry is
        removed). A file inside an entry's folder is read only when the folder is this user's own."""
        if not self.enabled:
            return None
        path = self.path(kind, *parts)
        if self._folder(kind, create=False) is None or len(parts) > 1 and not self._own_folder(kind, parts[0]):
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        except OSError as error:  # ELOOP: a symlink planted under the entry's name
            self.discard(kind, parts[0], f"it cannot be opened safely ({error.strerror})")
            return None
        try:
            info = os.fstat(fd)
            problem = _problem(info, "it") or (None if stat.S_ISREG(info.st_mode) else "it is not a regular file")
            if problem:
                self.discard(kind, parts[0], problem)
                return None
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read()
            _touch(fd)
            return data
        except OSError:
            return None
        finally:
            os.close(fd)

    def _own_folder(self, kind: str, name: str) -> bool:
        try:
            info = os.lstat(self.path(kind, name))
        except OSError:
            return False
        problem = _problem(info, "its folder") or (None if stat.S_ISDIR(info.st_mode) else "it is not a folder")
        if problem:
            self.discard(kind, name, problem)
        return problem is None

    def read_verified(self, kind: str, name: str, digest: str) -> bytes | None:
        """The bytes of a content-addressed entry, which must hash (SHA-256) to ``digest``; else None."""
        data = self.read(kind, name)
        if data is not None and not hmac.compare_digest(hashlib.sha256(data).hexdigest()[:len(digest)], digest):
            self.discard(kind, name, "its content does not match its hash")
            return None
        return data

    def read_sealed(self, kind: str, name: str, file: str | None = None) -> bytes | None:
        """The content of a sealed entry (or of the sealed ``file`` in entry ``name``'s folder), or None when it
        is absent or its seal does not hold (then it is removed)."""
        data = self.read(kind, name, *([file] if file else []))
        if data is None:
            return None
        head, _, content = data.partition(b"\n")
        if not head.startswith(_SEAL) or not hmac.compare_digest(head[len(_SEAL):], self._seal(kind, name, content)):
            self.discard(kind, name, "its seal does not hold (edited, moved from another name, or not written by "
                                     "tricomb)")
            return None
        return content

    def sealed(self, kind: str, name: str, content: bytes) -> bytes:
        """``content`` with the seal that binds it to entry ``name`` of ``kind``."""
        return _SEAL + self._seal(kind, name, content) + b"\n" + content

    def _seal(self, kind: str, name: str, content: bytes) -> bytes:
        message = kind.encode() + b"\0" + name.encode() + b"\0" + content
        return hmac.new(self.key, message, hashlib.sha256).hexdigest().encode()

    def discard(self, kind: str, name: str, why: str) -> None:
        """Remove a damaged or untrusted entry (never following a link), with a warning."""
        if not self.enabled:
            return
        warn_once(f"tricomb: cache entry {self.root / kind / name} was removed and will be rebuilt: {why}")
        _remove(self.root / kind / name)

    # -- writing ---------------------------------------------------------------------------------------------

    def write(self, kind: str, name: str, data: bytes) -> None:
        """Write entry ``name`` atomically and durably. Never raises: a failure turns the disk cache off."""
        if not self.enabled:
            return
        folder = self._folder(kind)
        if folder is None:
            return
        try:
            _write_file(folder, name, data)
        except OSError as error:
            self.turn_off(f"writing {folder / name} failed ({error.strerror or error})")
            return
        self._grew(len(data))

    def write_sealed(self, kind: str, name: str, content: bytes) -> None:
        self.write(kind, name, self.sealed(kind, name, content))

    def write_folder(self, kind: str, name: str, files: dict[str, bytes]) -> None:
        """Write a folder of files as one entry: staged in a temporary folder, then renamed into place whole."""
        if not self.enabled or (folder := self._folder(kind)) is None:
            return
        staging = None
        try:
            self.path(kind, name)
            staging = Path(tempfile.mkdtemp(dir=folder, prefix=".tmp-"))
            for file, data in files.items():
                _write_file(staging, file, data, rename=False)
            _fsync_dir(staging)
            os.rename(staging, folder / name)
            _fsync_dir(folder)
            self._grew(sum(len(d) for d in files.values()))
        except FileExistsError:
            pass
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):  # (another process wrote it first)
                self.turn_off(f"writing {folder / name} failed ({error.strerror or error})")
        finally:
            if staging is not None and staging.exists():
                shutil.rmtree(staging, ignore_errors=True)

    def _folder(self, kind: str, create: bool = True) -> Path | None:
        """The folder of ``kind`` (created 0700 if missing and ``create``), or None: missing, or not to be
        trusted. A symlink in its place is removed (never its target); any other problem turns the cache off."""
        folder = self.root / kind
        if kind in self._checked:
            return folder
        try:
            if create:
                try:
                    os.mkdir(folder, 0o700)
                except FileExistsError:
                    pass
            info = os.lstat(folder)
        except FileNotFoundError:
            return None
        except OSError as error:
            self.turn_off(f"{folder} cannot be made ({error.strerror or error})")
            return None
        if stat.S_ISLNK(info.st_mode):
            warn_once(f"tricomb: {folder} was a symbolic link; it was removed (not what it pointed to)")
            _remove(folder)
            return self._folder(kind, create) if create else None
        problem = _problem(info, str(folder)) or (None if stat.S_ISDIR(info.st_mode) else f"{folder} is not a "
                                                                                           "directory")
        if problem:
            self.turn_off(problem)
            return None
        self._checked.add(kind)
        return folder

    def turn_off(self, why: str) -> None:
        """Keep nothing more on disk in this process, with one warning."""
        if self.enabled:
            warn_once(f"tricomb: the disk cache {self.root} is off for this process: {why}; everything still "
                      "works, but kernels are built again in every new process")
            for kind in KINDS:  # (folders this process made and never filled: no litter)
                try:
                    os.rmdir(self.root / kind)
                except OSError:
                    pass
        self.root, self.state, self.reason = None, "off", why

    # -- size ------------------------------------------------------------------------------------------------

    def entries(self) -> list[tuple[str, str, int, float]]:
        """Every entry as (kind, name, bytes, last use); temporary files only once no writer can own them."""
        found = []
        for kind in KINDS:
            folder = self._folder(kind, create=False)
            try:
                names = os.listdir(folder) if folder is not None else []
            except OSError:
                continue
            for name in names:
                size, used = _size(folder / name)
                if not name.startswith(".") or time.time() - used > _STALE_SECONDS:  # (a dead writer's temporary)
                    found.append((kind, name, size, used))
        return found

    def _grew(self, added: int) -> None:
        with _LOCK:
            if self._used is None:
                self._used = sum(size for *_, size, _ in self.entries())
            else:
                self._used += added
            limit = max_bytes()
            if self._used > limit:
                self._used = self.evict(limit * 3 // 4)

    def evict(self, target: int) -> int:
        """Remove the least recently used entries until at most ``target`` bytes remain; the bytes left."""
        entries = sorted(self.entries(), key=lambda e: e[3])
        used = sum(size for *_, size, _ in entries)
        for kind, name, size, _ in entries:
            if used <= target:
                break
            _remove(self.root / kind / name)
            used -= size
        return used

    def clear(self) -> int:
        """Remove every entry, and the files an older tricomb kept at the top of the directory (the key stays,
        for processes still running); the bytes freed."""
        freed = 0
        for kind, name, size, _ in self.entries():
            _remove(self.root / kind / name)
            freed += size
        for path in self.root.iterdir():
            if _LEGACY.fullmatch(path.name) and not path.is_symlink() and path.is_file():
                freed += path.stat().st_size
                _remove(path)
        self._used = 0
        return freed


# -- files ---------------------------------------------------------------------------------------------------

def _write_file(folder: Path, name: str, data: bytes, rename: bool = True) -> None:
    """``data`` in ``folder/name``, flushed to disk; through a temporary file renamed into place if ``rename``."""
    target = folder / name
    temp = folder / f".tmp-{secrets.token_hex(8)}" if rename else target
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(data)
            f.flush()
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        _remove(temp)
        raise
    os.close(fd)
    if rename:
        try:
            os.replace(temp, target)
        except BaseException:
            _remove(temp)
            raise
        _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _touch(fd: int) -> None:
    """Mark an entry used now (its modification time orders eviction)."""
    try:
        os.utime(fd)
    except (OSError, NotImplementedError):
        pass


def _size(path: Path) -> tuple[int, float]:
    try:
        info = os.lstat(path)
    except OSError:
        return 0, 0.0
    if not stat.S_ISDIR(info.st_mode):
        return info.st_size, info.st_mtime
    total = 0
    for child in os.scandir(path):
        try:
            total += child.stat(follow_symlinks=False).st_size
        except OSError:
            pass
    return total, info.st_mtime


def _remove(path: Path) -> None:
    """Remove a file, link or folder at ``path`` without following links; missing is fine."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


# -- the directory -------------------------------------------------------------------------------------------

_STORES: dict[str, Store] = {}


def requested_dir() -> Path:
    """The directory asked for: ``$TRICOMB_CACHE_DIR`` (``~`` expanded), or ``~/.cache/tricomb``."""
    root = os.environ.get("TRICOMB_CACHE_DIR") or os.path.join("~", ".cache", "tricomb")
    return Path(os.path.abspath(os.path.expanduser(root)))


def store() -> Store:
    """The store for the directory asked for now, opened (and checked) once per process."""
    requested = requested_dir()
    with _LOCK:
        found = _STORES.get(str(requested))
        if found is None:
            found = _STORES[str(requested)] = _open(requested)
        return found


def _open(requested: Path) -> Store:
    max_bytes()  # a bad limit is refused at the first use, before anything is built or launched
    problem = _prepare(requested)
    if problem is None:
        key = _key(requested)
        if isinstance(key, bytes):
            return Store(requested, "private", key=key)
        problem = key
    if problem.startswith("untrusted: "):
        fallback = Path(tempfile.mkdtemp(prefix="tricomb-"))
        atexit.register(shutil.rmtree, fallback, True)
        reason = problem[len("untrusted: "):]
        warn_once(f"tricomb: not using the cache directory {requested}: {reason}; this process uses its own "
                  f"private directory {fallback} (removed at exit). Set TRICOMB_CACHE_DIR to a directory only you "
                  f"can write, or make {requested} yours alone (chmod 700 it, and chmod 600 its key), or remove it")
        return Store(fallback, "fallback", reason, key=secrets.token_bytes(_KEY_BYTES))
    warn_once(f"tricomb: the disk cache {requested} is off for this process: {problem}; everything still works, "
              "but kernels are built again in every new process")
    return Store(None, "off", problem)


def _prepare(root: Path) -> str | None:
    """Create ``root`` (0700) if missing; why it cannot be used, prefixed "untrusted: " when it can be but must
    not be, or None."""
    try:
        os.makedirs(root.parent, exist_ok=True)
        try:
            os.mkdir(root, 0o700)
        except FileExistsError:
            pass
        info = os.stat(root)  # the directory asked for may be reached through a link; nothing inside it may
    except OSError as error:
        return f"{root} cannot be made ({error.strerror or error})"
    if not stat.S_ISDIR(info.st_mode):
        return f"{root} is not a directory"
    problem = _problem(info, str(root))
    if problem:
        return "untrusted: " + problem
    if stat.S_IMODE(info.st_mode) & 0o077:
        try:
            os.chmod(root, 0o700)  # ours, readable by others (an older tricomb made it 0755): made private
        except OSError:
            pass
    if not os.access(root, os.W_OK | os.X_OK):
        return f"{root} cannot be written"
    return None


def _key(root: Path) -> bytes | str:
    """The directory's sealing key, made on first use; or why it cannot be had (prefixed "untrusted: " when the
    key file is not this user's own)."""
    path = root / "key"
    try:
        _create(root, "key", secrets.token_bytes(_KEY_BYTES))
    except OSError as error:
        return f"its key {path} cannot be made ({error.strerror or error})"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as error:
        return f"untrusted: its key {path} cannot be opened safely ({error.strerror or error})"
    try:
        info = os.fstat(fd)
        problem = _problem(info, f"its key {path}")
        if problem is None and stat.S_IMODE(info.st_mode) & 0o077:
            problem = f"its key {path} can be read by other users"
        key = os.read(fd, _KEY_BYTES + 1)
    finally:
        os.close(fd)
    if problem:
        return "untrusted: " + problem
    if len(key) != _KEY_BYTES:
        return f"untrusted: its key {path} is not {_KEY_BYTES} bytes long"
    return key


def _create(folder: Path, name: str, data: bytes) -> None:
    """Write ``folder/name`` whole unless it exists: flushed under a temporary name, then linked into place
    (a link never replaces), so no process ever reads a half-written key."""
    temp = f".tmp-{secrets.token_hex(8)}"
    _write_file(folder, temp, data, rename=False)
    try:
        os.link(folder / temp, folder / name)
    except FileExistsError:
        pass
    finally:
        _remove(folder / temp)
    _fsync_dir(folder)


def forget() -> None:
    """Drop the opened stores (tests change ``$TRICOMB_CACHE_DIR`` and the directory's state)."""
    with _LOCK:
        _STORES.clear()
        _WARNED.clear()
