# The disk cache: where it lives, what keys address, atomic writes under
# concurrent writers, and recovery from entries that do not read back intact;
# and the launcher's use of it for compiled kernels and ptxas reports.
from __future__ import annotations

import json
import multiprocessing
import os
import re
import threading
from pathlib import Path

import numpy as np
import pytest

import phobos
from phobos import __version__
from phobos.launch import cache, launcher
from phobos.launch.cache import DiskCache
from phobos.compiler import compile
from phobos.errors import ToolchainError
from phobos.ptxcheck import KernelReport, PtxasDiagnostic, Report
from phobos.toolchain import find_ptxas

from .launcher_fakes import ADD4, FakeGpu, forget_memory, install_cpu_module, random_vectors

KEY = {"kernel": "add", "config": {"BLOCK": 256}, "arch": "sm_90"}


def fresh(root: Path) -> DiskCache:
    """A cache object with an empty memory layer, as another process would have."""
    return DiskCache(root)


# --- location and keys


def test_the_directory_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path / "here"))
    assert cache.cache_dir() == tmp_path / "here"
    assert cache.default_cache().root == tmp_path / "here" and cache.default_cache() is cache.default_cache()
    monkeypatch.delenv("PHOBOS_CACHE_DIR")
    assert cache.cache_dir() == Path.home() / ".cache" / "phobos"


def test_keys_address_entries_whatever_their_order(tmp_path):
    store = DiskCache(tmp_path)
    reordered = {"arch": "sm_90", "config": {"BLOCK": 256}, "kernel": "add"}
    assert store.path_for("kernels", KEY) == store.path_for("kernels", reordered)
    assert store.path_for("kernels", KEY).parent == tmp_path / "kernels"
    for changed in ({**KEY, "arch": "sm_80"}, {**KEY, "config": {"BLOCK": 512}}, {**KEY, "kernel": "sub"}):
        assert store.path_for("kernels", changed) != store.path_for("kernels", KEY)
    assert store.path_for("autotune", KEY) != store.path_for("kernels", KEY)


def test_the_build_names_the_version_and_a_digest_of_the_sources():
    version, digest = cache.phobos_build().split("+")
    assert version == __version__ and len(digest) == 16


def test_the_build_digest_covers_every_stage_of_the_compiler(monkeypatch):
    read = []
    original = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda path: read.append(path) or original(path))
    cache.phobos_build.cache_clear()
    try:
        cache.phobos_build()
    finally:
        cache.phobos_build.cache_clear()
    package = Path(phobos.__file__).resolve().parent
    covered = {path.relative_to(package).as_posix() for path in read}
    assert {"compiler.py", "lower/memory.py", "ptx/emit.py", "frontend/sema.py", "launch/cache.py"} <= covered


def test_the_build_digest_is_read_from_the_cache_while_no_source_changes_size_or_time(monkeypatch):
    read = []
    original = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda path: read.append(path) or original(path))
    builds = []
    for _ in range(2):
        cache.phobos_build.cache_clear()
        monkeypatch.setattr(cache, "_caches", {})  # a new process: only the disk remembers
        builds.append(cache.phobos_build())
    assert builds[0] == builds[1] and len(read) == len({*read}) > 50  # every source read once, by the first
    sources = cache.package_sources(Path(phobos.__file__).resolve().parent)
    name, size, mtime = sources[0]
    monkeypatch.setattr(cache, "package_sources", lambda package: [(name, size, mtime + 1), *sources[1:]])
    monkeypatch.setattr(Path, "read_bytes", lambda path: b"changed" if path.as_posix().endswith("/" + name)
                        else original(path))
    cache.phobos_build.cache_clear()
    monkeypatch.setattr(cache, "_caches", {})
    try:
        assert cache.phobos_build() != builds[0]  # a source with another time is read again
    finally:
        cache.phobos_build.cache_clear()


# --- storing and loading


def test_round_trip_and_memory_layer(tmp_path):
    store = DiskCache(tmp_path)
    assert store.load("kernels", KEY) is None
    store.store("kernels", KEY, {"ptx": "text", "n": [1, 2.5, None]})
    assert fresh(tmp_path).load("kernels", KEY) == {"ptx": "text", "n": [1, 2.5, None]}
    store.path_for("kernels", KEY).unlink()
    assert store.load("kernels", KEY) == {"ptx": "text", "n": [1, 2.5, None]}  # from memory
    assert fresh(tmp_path).load("kernels", KEY) is None


def test_an_entry_another_process_wrote_is_remembered_without_writing(tmp_path):
    store = DiskCache(tmp_path)
    store.remember("kernels", KEY, {"ptx": "text"})
    assert store.load("kernels", KEY) == {"ptx": "text"}
    assert not store.path_for("kernels", KEY).exists() and fresh(tmp_path).load("kernels", KEY) is None


def test_entries_are_plain_json_holding_their_key(tmp_path):
    DiskCache(tmp_path).store("kernels", KEY, {"ptx": "text"})
    entry = json.loads(DiskCache(tmp_path).path_for("kernels", KEY).read_text())
    assert entry["key"] == KEY and entry["payload"] == {"ptx": "text"} and entry["format"] == 1


def corrupt_entries(text: str) -> dict[str, str]:
    entry = json.loads(text)
    return {
        "truncated": text[: len(text) // 2],
        "empty": "",
        "not json": "\x00\x01garbage",
        "not an object": "[1, 2, 3]",
        "altered payload": json.dumps({**entry, "payload": {"ptx": "other text"}}),
        "another key": json.dumps({**entry, "key": {**KEY, "arch": "sm_80"}}),
        "another format": json.dumps({**entry, "format": 0}),
        "no checksum": json.dumps({k: v for k, v in entry.items() if k != "checksum"}),
        "deeply nested": "[" * 100_000,
    }


@pytest.mark.parametrize("damage", list(corrupt_entries(json.dumps({"format": 1, "key": {}, "payload": {}}))))
def test_an_entry_that_does_not_read_back_intact_is_a_miss(tmp_path, damage):
    DiskCache(tmp_path).store("kernels", KEY, {"ptx": "text"})
    path = DiskCache(tmp_path).path_for("kernels", KEY)
    path.write_text(corrupt_entries(path.read_text())[damage])
    assert fresh(tmp_path).load("kernels", KEY) is None
    DiskCache(tmp_path).store("kernels", KEY, {"ptx": "rebuilt"})
    assert fresh(tmp_path).load("kernels", KEY) == {"ptx": "rebuilt"}


def test_an_unreadable_entry_is_a_miss(tmp_path):
    path = DiskCache(tmp_path).path_for("kernels", KEY)
    path.mkdir(parents=True)  # a directory where the file should be
    assert fresh(tmp_path).load("kernels", KEY) is None


def load_within(store: DiskCache, seconds: float = 10.0):
    """store.load(KEY), run in a thread: a read that never ends fails the test instead of hanging it."""
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(store.load("kernels", KEY)), daemon=True)
    reader.start()
    reader.join(seconds)
    assert not reader.is_alive(), "reading the entry did not finish"
    return outcome[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_in_place_of_an_entry_is_a_miss_without_waiting(tmp_path):
    path = DiskCache(tmp_path).path_for("kernels", KEY)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    assert load_within(fresh(tmp_path)) is None
    DiskCache(tmp_path).store("kernels", KEY, {"ptx": "rebuilt"})  # replaced by a regular file
    assert fresh(tmp_path).load("kernels", KEY) == {"ptx": "rebuilt"}


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_a_link_to_an_endless_device_is_a_miss(tmp_path):
    path = DiskCache(tmp_path).path_for("kernels", KEY)
    path.parent.mkdir(parents=True)
    path.symlink_to("/dev/zero")
    assert load_within(fresh(tmp_path)) is None


def test_entries_beyond_the_size_bound_are_neither_read_nor_written(tmp_path, monkeypatch):
    path = DiskCache(tmp_path).path_for("kernels", KEY)
    path.parent.mkdir(parents=True)
    with open(path, "wb") as file:  # hundreds of MB, sparse: a read of the whole would take a while
        file.truncate(300 * 1024 * 1024)
    assert load_within(fresh(tmp_path)) is None
    DiskCache(tmp_path).store("kernels", KEY, {"ptx": "x" * 100})
    entry_bytes = path.stat().st_size
    assert fresh(tmp_path).load("kernels", KEY) == {"ptx": "x" * 100}
    monkeypatch.setattr(cache, "MAX_ENTRY_BYTES", entry_bytes - 1)
    assert fresh(tmp_path).load("kernels", KEY) is None
    store = DiskCache(tmp_path)
    store.store("kernels", {**KEY, "arch": "sm_80"}, {"ptx": "x" * entry_bytes})
    assert not store.path_for("kernels", {**KEY, "arch": "sm_80"}).exists()
    assert store.load("kernels", {**KEY, "arch": "sm_80"}) == {"ptx": "x" * entry_bytes}  # in memory only


def test_a_cache_that_cannot_be_written_is_warned_about_once(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = DiskCache(blocker / "cache")
    store.store("kernels", KEY, {"ptx": "text"})
    store.store("kernels", {**KEY, "arch": "sm_80"}, {"ptx": "text"})
    [record] = caplog.records
    assert record.name == "phobos.launch.cache" and record.levelname == "WARNING"
    assert re.fullmatch(r"cannot write the cache under .*file/cache \(.*\); set PHOBOS_CACHE_DIR to a writable "
                        r"directory", record.getMessage())
    assert store.load("kernels", KEY) == {"ptx": "text"}  # still served from memory


def test_info_counts_entries_and_bytes_per_namespace_and_clear_deletes_them(tmp_path):
    store = DiskCache(tmp_path)
    store.store("kernels", KEY, {"ptx": "x" * 100})
    store.store("kernels", {**KEY, "arch": "sm_80"}, {"ptx": "y"})
    store.store("autotune", KEY, {"config": {}})
    (tmp_path / "kernels" / ".tmp-left-by-a-killed-writer.json").write_text("{")
    info = store.info()
    assert info.root == tmp_path and info.entries == {"kernels": 2, "ptxas": 0, "autotune": 1, "tuned": 0}
    kernel_files = [p for p in (tmp_path / "kernels").glob("*.json") if not p.name.startswith(".tmp-")]
    assert info.bytes["kernels"] == sum(p.stat().st_size for p in kernel_files) and info.bytes["ptxas"] == 0
    lines = info.summary().splitlines()
    assert lines[0] == f"cache: {tmp_path}" and lines[1].startswith("  kernels: 2 entries, ")
    assert lines[-1].startswith("  total: 3 entries, ")
    assert store.clear() == 3
    assert list((tmp_path / "kernels").iterdir()) == [] and store.info().entries == {
        "kernels": 0, "ptxas": 0, "autotune": 0, "tuned": 0}
    assert store.load("kernels", KEY) is None  # forgotten in memory too


def test_info_of_a_cache_that_does_not_exist_yet(tmp_path):
    info = DiskCache(tmp_path / "nowhere").info()
    assert info.entries == {"kernels": 0, "ptxas": 0, "autotune": 0, "tuned": 0} and sum(info.bytes.values()) == 0
    assert DiskCache(tmp_path / "nowhere").clear() == 0


def write_many(root: str, writer: int, count: int) -> None:
    store = DiskCache(Path(root))
    for i in range(count):
        store.store("kernels", KEY, {"writer": writer, "i": i, "ptx": "x" * (1000 + 7919 * writer % 5000)})


def read_many(root: str, count: int, results) -> None:
    seen = []
    for _ in range(count):
        payload = DiskCache(Path(root)).load("kernels", KEY)
        if payload is not None:
            seen.append((payload["writer"], len(payload["ptx"])))
    results.put(seen)


def test_concurrent_writers_never_leave_a_partial_entry(tmp_path):
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    writers = [context.Process(target=write_many, args=(str(tmp_path), w, 150)) for w in range(4)]
    reader = context.Process(target=read_many, args=(str(tmp_path), 600, results))
    for process in [*writers, reader]:
        process.start()
    seen = results.get(timeout=120)
    for process in [*writers, reader]:
        process.join(timeout=120)
        assert process.exitcode == 0
    # every entry read was whole: one writer's payload, with that writer's length
    assert all(length == 1000 + 7919 * writer % 5000 for writer, length in seen)
    final = fresh(tmp_path).load("kernels", KEY)
    assert final["i"] == 149
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == [DiskCache(tmp_path).path_for("kernels", KEY).name]


# --- payloads


def test_compiled_kernels_round_trip():
    kernel = compile(ADD4, config={"BLOCK": 512})
    decoded = cache.decode_compiled(json.loads(json.dumps(cache.encode_compiled(kernel))))
    assert decoded == type(kernel)(**{**kernel.__dict__, "timings": {}})


def test_reports_round_trip():
    report = Report("sm_90", "add.ptx", True, [KernelReport("add", 12, 0, 0, 0, 0)],
                    warnings=[PtxasDiagnostic("add.ptx", 3, "careful", "warning")], raw="ptxas info")
    assert cache.decode_report(json.loads(json.dumps(cache.encode_report(report)))) == report


@pytest.mark.parametrize("payload", [
    {}, [], {"ptx": 1}, "text",
    {**cache.encode_compiled(compile(ADD4)), "threads": "32"},
    {**cache.encode_compiled(compile(ADD4)), "params": [{"name": "a"}]},
    {**cache.encode_compiled(compile(ADD4)), "grid_hint": [["N"]]},
    {**cache.encode_compiled(compile(ADD4)), "config": {"BLOCK": True}},
])
def test_malformed_compiled_payloads_are_rejected(payload):
    with pytest.raises(cache.MalformedEntry):
        cache.decode_compiled(payload)


@pytest.mark.parametrize("payload", [{}, {"kernels": 3}, {**cache.encode_report(Report("sm_90", "x", True)), "ok": 1}])
def test_malformed_report_payloads_are_rejected(payload):
    with pytest.raises(cache.MalformedEntry):
        cache.decode_report(payload)


# --- the launcher's use of the cache


@pytest.fixture
def counted_compiles(monkeypatch):
    """Each configuration the launcher compiles, in order."""
    compiled = []
    real = launcher.compile_kernel

    def counting(node, *, arch, config):
        compiled.append(dict(config))
        return real(node, arch=arch, config=config)

    monkeypatch.setattr(launcher, "compile_kernel", counting)
    return compiled


def run_add(mode) -> phobos.launch.launcher.KernelFunction:
    add = phobos.kernel(ADD4, mode=mode).configure(BLOCK=256)
    a, b = random_vectors(100)
    add(a, b, np.empty_like(a))
    return add


def test_compiled_kernels_are_reused_across_processes(monkeypatch, isolated_cache, counted_compiles):
    forget_memory(monkeypatch)
    install_cpu_module(monkeypatch, "phobos.run.emulator", "launch")
    first = run_add("emulate").ptx
    assert counted_compiles == [{"BLOCK": 256}]
    run_add("emulate")
    assert counted_compiles == [{"BLOCK": 256}]  # memory
    forget_memory(monkeypatch)
    assert run_add("emulate").ptx == first and counted_compiles == [{"BLOCK": 256}]  # disk
    (entry,) = (isolated_cache / cache.COMPILED).iterdir()
    entry.write_text(entry.read_text()[:-100])
    forget_memory(monkeypatch)
    assert run_add("emulate").ptx == first and counted_compiles == [{"BLOCK": 256}] * 2  # rebuilt
    forget_memory(monkeypatch)
    run_add("emulate")
    assert len(counted_compiles) == 2  # and rewritten


def test_a_wrong_but_intact_payload_is_rebuilt(monkeypatch, isolated_cache, counted_compiles):
    forget_memory(monkeypatch)
    run_add(FakeGpu())
    path = next((isolated_cache / cache.COMPILED).iterdir())
    entry = json.loads(path.read_text())
    DiskCache(isolated_cache).store(cache.COMPILED, entry["key"], {"ptx": 42})
    forget_memory(monkeypatch)
    run_add(FakeGpu())
    assert len(counted_compiles) == 2


def test_ptxas_reports_are_cached(monkeypatch, isolated_cache):
    try:
        find_ptxas()
    except ToolchainError as error:
        pytest.skip(error.message)
    add = run_add(FakeGpu())
    registers = add.ptxas.kernel("add").registers
    forget_memory(monkeypatch)
    monkeypatch.setattr(launcher, "ptxas_assemble", lambda *a, **k: pytest.fail("ptxas ran again"))
    assert run_add(FakeGpu()).ptxas.kernel("add").registers == registers
    assert len(list((isolated_cache / cache.PTXAS).iterdir())) == 1
    (cubin,) = (isolated_cache / cache.CUBIN).iterdir()  # what ptxas made, kept for the driver
    assert DiskCache(isolated_cache).load(cache.CUBIN, json.loads(cubin.read_text())["key"])["cubin"]


# --- trust: a cache someone else controls is not used


def plant_subtraction(root: Path) -> None:
    """Replace the PTX of every compiled kernel under `root` with one that subtracts, keeping each entry
    well-formed with a checksum that matches (which anyone can recompute)."""
    for path in (root / cache.COMPILED).iterdir():
        entry = json.loads(path.read_text())
        entry["payload"]["ptx"] = entry["payload"]["ptx"].replace("add.rn.f32", "sub.rn.f32")
        entry["checksum"] = cache.text_digest(cache.canonical_json(entry["payload"]))
        path.write_text(json.dumps(entry))


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="files have no owners here")
@pytest.mark.parametrize("how", ["world-writable", "another user's"])
def test_a_planted_kernel_in_a_cache_someone_else_controls_is_never_run(monkeypatch, isolated_cache, caplog, how):
    forget_memory(monkeypatch)
    a, b = random_vectors(100)
    run_add("emulate")
    plant_subtraction(isolated_cache)
    if how == "world-writable":
        isolated_cache.chmod(0o777)
    else:
        monkeypatch.setattr(os, "getuid", lambda: os.stat(isolated_cache).st_uid + 1)
    forget_memory(monkeypatch)
    add = phobos.kernel(ADD4, mode="emulate").configure(BLOCK=256)
    c = np.empty_like(a)
    add(a, b, c)
    np.testing.assert_array_equal(c, a + b)
    warnings = [r.getMessage() for r in caplog.records if r.name == "phobos.launch.cache"]
    assert len(warnings) == 1 and warnings[0].startswith(f"not using the cache under {isolated_cache}: ")
    assert ("can be written by its group or by others (mode 0777)" if how == "world-writable" else
            "belongs to another user") in warnings[0]


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="files have no owners here")
def test_a_cache_under_a_directory_others_can_change_is_not_used(tmp_path, caplog):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o775)  # group-writable, not sticky: the group could replace the cache
    store = DiskCache(shared / "cache")
    store.store("kernels", KEY, {"ptx": "text"})
    assert not (shared / "cache").exists() and store.distrust().startswith(f"{shared} can be written")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp: others cannot remove what is the user's
    DiskCache(sticky / "cache").store("kernels", KEY, {"ptx": "text"})
    assert fresh(sticky / "cache").load("kernels", KEY) == {"ptx": "text"}


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="files have no owners here")
def test_the_cache_makes_its_directories_0700_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        DiskCache(tmp_path / "new" / "cache").store("kernels", KEY, {"ptx": "text"})
    finally:
        os.umask(old)
    for directory in (tmp_path / "new", tmp_path / "new" / "cache", tmp_path / "new" / "cache" / "kernels"):
        assert oct(directory.stat().st_mode & 0o777) == oct(0o700), directory
    (entry,) = (tmp_path / "new" / "cache" / "kernels").iterdir()
    assert entry.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("change", [{"threads": -64}, {"ptx": ""}, {"arch": "sm_99"}, {"index_bits": 48},
                                    {"shared_bytes": -1}])
def test_a_well_formed_entry_with_impossible_values_is_rebuilt(monkeypatch, isolated_cache, counted_compiles,
                                                               change):
    forget_memory(monkeypatch)
    first = run_add("emulate").ptx
    path = next((isolated_cache / cache.COMPILED).iterdir())
    entry = json.loads(path.read_text())
    DiskCache(isolated_cache).store(cache.COMPILED, entry["key"], {**entry["payload"], **change})
    forget_memory(monkeypatch)
    assert run_add("emulate").ptx == first and len(counted_compiles) == 2   # rebuilt ...
    forget_memory(monkeypatch)
    assert run_add("emulate").ptx == first and len(counted_compiles) == 2   # ... and written over the bad one
