# The on-disk cache: compiled kernels, ptxas reports and autotune choices.
#
# Compiling a configuration takes about a second and tuning a kernel many, so
# both outcomes are kept under $PHOBOS_CACHE_DIR (default ~/.cache/phobos),
# one JSON file per entry:
#
#   <root>/<namespace>/<sha256 of the key>.json
#   {"format": 1, "key": {...}, "checksum": "<sha256 of the payload>", "payload": {...}}
#
# The key is stored whole, so an entry is only ever read back for the key that
# wrote it, and the checksum catches a file that was truncated or altered: any
# entry that does not read back exactly is treated as missing (and is
# overwritten when its value is rebuilt); it is never trusted and never makes
# a caller fail.  Only a regular file of at most MAX_ENTRY_BYTES is read: a
# FIFO or a link to a device in its place (reading would wait forever, or
# never end) and an oversized file are misses too, found without reading them.  Writes go to a temporary file in the same directory and are
# renamed into place (os.replace), so several processes may fill the cache at
# once and a reader sees either a whole entry or none.  Entries are plain JSON,
# never pickles: reading a cache file runs no code.
#
# Keys carry `phobos_build()`, the version plus a digest of Phobos's own
# sources, so that a changed compiler never reuses what an older one produced
# (the digest itself is kept under the sources' sizes and times, namespace
# `builds`, so a process reads them only when one changed).
# The cubin ptxas made of a kernel's PTX is kept under the same key as its
# report (namespace `cubins`, base64 in the JSON), so the driver loads it
# instead of compiling the PTX a second time.  Namespace `tuned` marks the
# kernels (by source digest, name and build) that have been tuned at least
# once: loading a module whose kernels all carry the mark does not start the
# compile workers ahead of the first call (launcher.Module).
# The cache is trusted as ssh trusts its keys: its root must be a directory of
# the user's own that no one else can write, under directories that only their
# owner (the user or root) can change, or that keep others' entries apart (the
# sticky bit of /tmp); each namespace directory and entry file must be the
# user's too.  A checksum anyone can recompute guards against damage, not
# against a neighbour who plants a kernel: a root that fails the test is not
# used at all, with one warning, and the process compiles for itself.  The
# directories the cache makes are 0700 whatever the umask, its files 0600.  A
# well-formed payload with impossible values (threads <= 0, no PTX, an unknown
# target) does not decode: it is damaged, and rebuilt like one that does not
# read back.
# Above the disk sits a per-process dictionary, so a key is read from disk at
# most once per process.  `info` and `clear` are what `python -m phobos cache
# info|clear` shows and does.  The encoders at the end turn CompiledKernels
# and ptxas Reports into payloads and back.
from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from ..version import __version__
from ..compiler import TARGETS, CompiledKernel, KernelParam
from ..errors import PhobosError
from ..ptxcheck import KernelReport, PtxasDiagnostic, Report
from ..types import DType

ENTRY_FORMAT = 1

#: The largest entry read or written (the PTX of the largest kernels the compiler accepts is a few MB).
MAX_ENTRY_BYTES = 32 * 1024 * 1024
DEFAULT_CACHE_DIR = Path("~/.cache/phobos")

#: Namespaces (subdirectories) of the cache.
COMPILED = "kernels"
PTXAS = "ptxas"
CUBIN = "cubins"
AUTOTUNE = "autotune"
TUNED = "tuned"  # marks of the kernels a build has tuned (launcher.Module._start_compile_workers)
BUILDS = "builds"  # phobos_build's digests, by the sources' sizes and times
NAMESPACES = (COMPILED, PTXAS, AUTOTUNE, TUNED)

#: How the files being written start (renamed into place when whole).
TEMPORARY_PREFIX = ".tmp-"

logger = logging.getLogger(__name__)


def cache_dir() -> Path:
    """The cache's root: $PHOBOS_CACHE_DIR, or ~/.cache/phobos."""
    return Path(os.environ.get("PHOBOS_CACHE_DIR") or DEFAULT_CACHE_DIR).expanduser()


@functools.lru_cache(maxsize=None)
def phobos_build() -> str:
    """The version and a digest of the package's sources (all of phobos/, not only this folder).

    Reading and hashing a hundred sources costs more than the rest of a warm
    process's first call, so the digest is kept in the cache (namespace
    BUILDS) under each source's name, size and modification time - what
    Python itself trusts to reuse a compiled .pyc - and the sources are read
    again only when one of those changes."""
    package = Path(__file__).resolve().parent.parent
    sources = package_sources(package)
    key = {"version": __version__, "package": str(package),
           "sources": text_digest(canonical_json([[name, size, mtime] for name, size, mtime in sources]))}
    store = default_cache()
    build = store.load(BUILDS, key)
    if not (isinstance(build, str) and build.startswith(f"{__version__}+")):
        build = f"{__version__}+{source_digest(package, [name for name, _, _ in sources])}"
        store.store(BUILDS, key, build)
    return build


def package_sources(package: Path) -> list[tuple[str, int, int]]:
    """(path under `package`, size, modification time in ns) of each Python source in it, by path."""
    found, prefix = [], len(str(package)) + 1
    for directory, subdirectories, files in os.walk(package):
        subdirectories[:] = [name for name in subdirectories if name != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                info = os.stat(path)
                found.append((path[prefix:].replace(os.sep, "/"), info.st_size, info.st_mtime_ns))
    return sorted(found)


def source_digest(package: Path, names: list[str]) -> str:
    """A digest of the sources `names` (paths under `package`): their paths and contents."""
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode() + b"\0" + (package / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def canonical_json(value: Any) -> str:
    """One text per value: sorted keys, no spaces; what keys and checksums are made of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


class DiskCache:
    """JSON entries under one root directory, with a per-process memory layer."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._memory: dict[tuple[str, str], Any] = {}
        self._write_warned = False
        self._distrust: str | None = None   # why the disk is not used, once found
        self._trusted: set[Path] = set()    # directories found to be the user's own

    def path_for(self, namespace: str, key: dict) -> Path:
        return self.root / namespace / f"{text_digest(canonical_json(key))}.json"

    def distrust(self) -> str | None:
        """Why the directories of this cache are not to be used (see the header), or None; warned about
        once, and then the disk is left alone."""
        if self._distrust is None:
            reason = None
            for directory in (self.root, *(self.root / n for n in (*NAMESPACES, CUBIN, BUILDS))):
                if directory in self._trusted:
                    continue
                if not directory.exists():
                    reason = untrusted_ancestors(directory) if directory == self.root else None
                else:
                    reason = untrusted(directory)
                    if reason is None:
                        self._trusted.add(directory)
                if reason is not None:
                    self._distrust = reason
                    logger.warning("not using the cache under %s: %s; set PHOBOS_CACHE_DIR to a directory of "
                                   "your own that no one else can write", self.root, reason)
                    break
        return self._distrust

    def load(self, namespace: str, key: dict) -> Any | None:
        """The payload stored for `key`, or None if there is none or it does not read back intact."""
        memory_key = (namespace, canonical_json(key))
        if memory_key in self._memory:
            return self._memory[memory_key]
        if self.distrust() is not None:
            return None
        try:
            text = _read_entry(self.path_for(namespace, key))
            entry = json.loads(text) if text is not None else None
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            return None
        if not _intact(entry, key):
            return None
        self._memory[memory_key] = entry["payload"]
        return entry["payload"]

    def remember(self, namespace: str, key: dict, payload: Any) -> None:
        """Keep the entry in the memory layer only: another process (a compile worker) wrote it to disk."""
        self._memory[(namespace, canonical_json(key))] = payload

    def store(self, namespace: str, key: dict, payload: Any) -> None:
        """Write the entry atomically; a cache that cannot be written is warned about once, not fatal."""
        self.remember(namespace, key, payload)
        path = self.path_for(namespace, key)
        entry = {"format": ENTRY_FORMAT, "key": key, "checksum": text_digest(canonical_json(payload)),
                 "payload": payload}
        text = json.dumps(entry, sort_keys=True, allow_nan=False)
        if len(text.encode()) > MAX_ENTRY_BYTES:
            return  # it would never be read back; the memory layer keeps it for this process
        try:
            if untrusted_ancestors(self.root) is None:
                make_private_directories(path.parent)
            if self.distrust() is not None:
                return
            _write_atomically(path, text)
        except OSError as error:
            if not self._write_warned:
                self._write_warned = True
                logger.warning("cannot write the cache under %s (%s); set PHOBOS_CACHE_DIR to a writable "
                               "directory", self.root, error)

    def info(self) -> CacheInfo:
        """How many entries each namespace holds on disk, and how many bytes."""
        counts, sizes = {}, {}
        for namespace in NAMESPACES:
            files = [path for path in (self.root / namespace).glob("*.json")
                     if path.is_file() and not path.name.startswith(TEMPORARY_PREFIX)]
            counts[namespace] = len(files)
            sizes[namespace] = sum(_size(path) for path in files)
        return CacheInfo(self.root, counts, sizes, self.distrust())

    def clear(self) -> int:
        """Delete every entry (and leftover temporary file) on disk and in memory; the number of entries deleted.
        A cache that is not the user's own is left alone (PhobosError)."""
        self._memory.clear()
        if self.distrust() is not None:
            raise PhobosError(f"not clearing the cache under {self.root}: {self._distrust}")
        deleted = 0
        for namespace in NAMESPACES:
            for path in (self.root / namespace).glob("*.json"):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    deleted += not path.name.startswith(TEMPORARY_PREFIX)
        return deleted


@dataclasses.dataclass
class CacheInfo:
    """What `DiskCache.info` reports: per namespace, the entries on disk and their bytes."""

    root: Path
    entries: dict[str, int]
    bytes: dict[str, int]
    distrust: str | None = None  # why the cache is not used (DiskCache.distrust)

    def summary(self) -> str:
        lines = [f"cache: {self.root}"] + ([f"  not used: {self.distrust}"] if self.distrust else [])
        lines += [f"  {namespace}: {entries_text(self.entries[namespace])}, {_human(self.bytes[namespace])}"
                  for namespace in self.entries]
        lines.append(f"  total: {entries_text(sum(self.entries.values()))}, {_human(sum(self.bytes.values()))}")
        return "\n".join(lines)


def entries_text(count: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # removed by another process meanwhile
        return 0


def _human(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"


def _read_entry(path: Path) -> str | None:
    """The text of the entry file at `path`; None when it is not a regular file of at most MAX_ENTRY_BYTES.

    The file is looked at before it is opened, and again once open (it may have
    been replaced in between); O_NONBLOCK keeps opening a FIFO from waiting for
    a writer.  Raises OSError when it cannot be read.
    """
    if not _readable_entry(os.stat(path)):
        return None
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(descriptor, "rb") as file:
        if not _readable_entry(os.fstat(file.fileno())):
            return None
        data = file.read(MAX_ENTRY_BYTES + 1)
    return data.decode("utf-8") if len(data) <= MAX_ENTRY_BYTES else None


def _readable_entry(info: os.stat_result) -> bool:
    return stat.S_ISREG(info.st_mode) and info.st_size <= MAX_ENTRY_BYTES and _owned(info)


def _owned(info: os.stat_result) -> bool:
    """Whether the user owns the file (always, where files have no owners)."""
    return not hasattr(os, "getuid") or info.st_uid == os.getuid()


def untrusted(directory: Path) -> str | None:
    """Why `directory` (which exists) is no place to read trusted entries from, or None: it must be a
    directory of the user's own that group and others cannot write, under ancestors that are safe
    (`untrusted_ancestors`)."""
    if not hasattr(os, "getuid"):
        return None
    info = os.stat(directory)
    if not stat.S_ISDIR(info.st_mode):
        return f"{directory} is not a directory"
    if info.st_uid != os.getuid():
        return f"{directory} belongs to another user (uid {info.st_uid})"
    if info.st_mode & 0o022:
        return f"{directory} can be written by its group or by others (mode {stat.S_IMODE(info.st_mode):04o})"
    return untrusted_ancestors(directory)


def untrusted_ancestors(path: Path) -> str | None:
    """Why the existing directories above `path` would let someone else replace it, or None: each must
    belong to the user or to root, and be writable by no one else unless sticky (as /tmp is)."""
    if not hasattr(os, "getuid"):
        return None
    for ancestor in Path(os.path.realpath(path)).parents:
        try:
            info = os.stat(ancestor)
        except FileNotFoundError:
            continue
        if info.st_uid not in (0, os.getuid()):
            return f"{ancestor} belongs to another user (uid {info.st_uid})"
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            return f"{ancestor} can be written by its group or by others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def make_private_directories(path: Path) -> None:
    """Make `path` and the directories above it that are missing, each 0700 whatever the umask."""
    missing = []
    for directory in [path, *path.parents]:
        if directory.exists():
            break
        missing.append(directory)
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)
            os.chmod(directory, 0o700)


def _intact(entry: Any, key: dict) -> bool:
    """Whether a decoded file is a whole entry of the current format for exactly `key`."""
    if not isinstance(entry, dict) or entry.get("format") != ENTRY_FORMAT or "payload" not in entry:
        return False
    if entry.get("key") != key:
        return False
    try:
        return entry.get("checksum") == text_digest(canonical_json(entry["payload"]))
    except (TypeError, ValueError):
        return False


def _write_atomically(path: Path, text: str) -> None:
    """Write `text` to a temporary file next to `path`, then rename it over `path`."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=TEMPORARY_PREFIX, suffix=".json")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


_caches: dict[Path, DiskCache] = {}


def default_cache() -> DiskCache:
    """The cache under cache_dir(), one object (and memory layer) per root per process."""
    return cache_at(cache_dir())


def cache_at(root: Path) -> DiskCache:
    """The cache under `root`, one object (and memory layer) per root per process."""
    if root not in _caches:
        _caches[root] = DiskCache(root)
    return _caches[root]


def assembled_key(ptx: str, arch: str, ptxas: str) -> dict:
    """The key of ptxas's report on a kernel's PTX, and of the cubin it made of it (namespaces PTXAS, CUBIN)."""
    return {"ptx": text_digest(ptx), "arch": arch, "ptxas": ptxas, "build": phobos_build()}


# ---------------------------------------------------------------------------
# Payloads: what is stored for a compiled kernel and for a ptxas report.
# A payload that does not decode raises MalformedEntry; callers treat it as a miss.


class MalformedEntry(Exception):
    """A cache payload that is well-formed JSON but not what the entry should hold."""


def encode_compiled(kernel: CompiledKernel) -> dict:
    return {
        "ptx": kernel.ptx, "kernel_name": kernel.kernel_name, "config": kernel.config, "arch": kernel.arch,
        "threads": kernel.threads, "shared_bytes": kernel.shared_bytes,
        "registers_estimate": kernel.registers_estimate,
        "params": [{"name": p.name, "kind": p.kind, "dtype": p.dtype.value, "dims": list(p.dims),
                    "written": p.written, "box": list(p.box), "rounds": p.rounds} for p in kernel.params],
        "grid_hint": [list(hint) if hint is not None else None for hint in kernel.grid_hint],
        "index_bits": kernel.index_bits, "read_only_cache": kernel.read_only_cache,
        "notes": list(kernel.notes), "schedules": list(kernel.schedules), "cluster": kernel.cluster,
    }


def decode_compiled(payload: Any) -> CompiledKernel:
    try:
        params = [KernelParam(_typed(p["name"], str), _typed(p["kind"], str), DType(p["dtype"]),
                              tuple(_typed(d, (str, int)) for d in p["dims"]), _typed(p["written"], bool),
                              tuple(_typed(n, int) for n in p.get("box", ())), _typed(p.get("rounds", False), bool))
                  for p in payload["params"]]
        hints = [None if h is None else (_typed(h[0], str), _typed(h[1], int)) for h in payload["grid_hint"]]
        config = {_typed(name, str): _typed(value, int) for name, value in payload["config"].items()}
        _possible(payload)
        return CompiledKernel(
            ptx=_typed(payload["ptx"], str), kernel_name=_typed(payload["kernel_name"], str), config=config,
            params=params, arch=_typed(payload["arch"], str), threads=_typed(payload["threads"], int),
            shared_bytes=_typed(payload["shared_bytes"], int),
            registers_estimate=_typed(payload["registers_estimate"], int), grid_hint=hints,
            index_bits=_typed(payload["index_bits"], int), read_only_cache=_typed(payload["read_only_cache"], bool),
            notes=[_typed(note, str) for note in payload["notes"]],
            schedules=[_typed(text, str) for text in payload.get("schedules", [])],
            cluster=_typed(payload.get("cluster", 1), int))
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
        raise MalformedEntry(f"not a compiled kernel: {error}") from None


def _possible(payload: dict) -> None:
    """MalformedEntry unless a compiled kernel's values are ones the compiler can make: a PTX text with
    the kernel's entry, a known target, 1 to 1024 threads, no negative sizes, 32- or 64-bit indices."""
    name, ptx = payload["kernel_name"], payload["ptx"]
    problems = [
        (not name or f".entry {name}(" not in ptx, "no PTX entry for the kernel"),
        (payload["arch"] not in TARGETS, f"unknown target {payload['arch']!r}"),
        (not 1 <= payload["threads"] <= 1024, f"{payload['threads']} threads"),
        (payload["shared_bytes"] < 0 or payload["registers_estimate"] < 0, "a negative size"),
        (payload["index_bits"] not in (32, 64), f"{payload['index_bits']}-bit indices"),
    ]
    for bad, what in problems:
        if bad:
            raise MalformedEntry(f"not a compiled kernel: {what}")


def encode_report(report: Report) -> dict:
    return dataclasses.asdict(report)


def decode_report(payload: Any) -> Report:
    try:
        fields = {f.name: payload[f.name] for f in dataclasses.fields(Report)}
        fields["kernels"] = [KernelReport(**_typed(k, dict)) for k in fields["kernels"]]
        for name in ("errors", "warnings"):
            fields[name] = [PtxasDiagnostic(**_typed(d, dict)) for d in fields[name]]
        for name, kind in (("arch", str), ("name", str), ("ok", bool), ("raw", str)):
            _typed(fields[name], kind)
        for kernel in fields["kernels"]:
            sizes = (kernel.registers, kernel.spill_stores, kernel.spill_loads, kernel.shared_bytes,
                     kernel.stack_bytes)
            if not all(isinstance(n, int) and n >= 0 for n in sizes) or kernel.registers > 255:
                raise MalformedEntry(f"not a ptxas report: impossible figures for {kernel.name!r}")
        return Report(**fields)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise MalformedEntry(f"not a ptxas report: {error}") from None


def encode_cubin(cubin: bytes) -> dict:
    return {"cubin": base64.b64encode(cubin).decode("ascii")}


def decode_cubin(payload: Any) -> bytes:
    try:
        cubin = base64.b64decode(_typed(payload["cubin"], str), validate=True)
    except (KeyError, TypeError, binascii.Error) as error:
        raise MalformedEntry(f"not a cubin: {error}") from None
    if not cubin.startswith(b"\x7fELF"):
        raise MalformedEntry("not a cubin: no ELF header")
    return cubin


def _typed(value: Any, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"unexpected {type(value).__name__} {value!r}")
    return value
