# Choosing configurations, on the CPU: the choice logic with a fake timer,
# screening against device limits and ptxas reports, and the launcher's
# tuning with a fake GPU that records which buffers each launch was given.
from __future__ import annotations

import logging
import re
from dataclasses import replace

import numpy as np
import pytest

import phobos
from phobos.launch import cache, launcher
from phobos.configuration import config_text
from phobos.launch.autotune import CAREFUL, FINALISTS, QUICK, Skipped, Timing, careful_sample, screen, tune
from phobos.compiler import compile
from phobos.errors import LaunchError, PtxasTimeout, ResourceError
from phobos.ptxcheck import KernelReport, PtxasDiagnostic, Report

from .launcher_fakes import (ADD4, FAKE_DEVICE, TWO_PARAMETERS, DeviceArray, FakeGpu, forget_memory,
                             install_cpu_module, random_vectors)

CONFIGS = [{"BLOCK": b} for b in (128, 256, 512, 1024)]


def fake_timer(times: dict[int, float]):
    """measure(): the time listed for the configuration's BLOCK, however carefully it is timed."""
    return lambda config, timing: times[config["BLOCK"]]


# --- the choice


def test_the_fastest_configuration_wins():
    result = tune("add", CONFIGS, lambda c: c, fake_timer({128: 3.0, 256: 1.5, 512: 0.5, 1024: 2.0}))
    assert result.config == {"BLOCK": 512}
    assert result.timings == {"BLOCK=128": 3.0, "BLOCK=256": 1.5, "BLOCK=512": 0.5, "BLOCK=1024": 2.0}


def test_ties_go_to_the_first_listed():
    assert tune("add", CONFIGS, lambda c: c, lambda c, timing: 1.0).config == {"BLOCK": 128}


def test_skipped_configurations_are_recorded_with_their_reasons():
    def evaluate(config):
        if config["BLOCK"] == 128:
            raise Skipped("needs 300000 bytes of shared memory")
        if config["BLOCK"] == 1024:
            raise ResourceError("the tile needs more registers than a thread has")
        return config

    result = tune("add", CONFIGS, evaluate, fake_timer({256: 2.0, 512: 3.0}))
    assert result.config == {"BLOCK": 256}
    assert result.timings == {"BLOCK=128": "needs 300000 bytes of shared memory", "BLOCK=256": 2.0,
                              "BLOCK=512": 3.0, "BLOCK=1024": "the tile needs more registers than a thread has"}


def test_failures_while_timing_are_reasons_too():
    def measure(config, timing):
        if config["BLOCK"] == 512:
            raise LaunchError("kernel 'add' failed: too many resources requested for launch")
        return 1.0 + config["BLOCK"]

    result = tune("add", CONFIGS, lambda c: c, measure)
    assert result.config == {"BLOCK": 128}
    assert result.timings["BLOCK=512"] == "kernel 'add' failed: too many resources requested for launch"


def test_spilling_configurations_are_timed_only_when_nothing_else_runs():
    timed = []

    def measure(config, timing):
        timed.append(config["BLOCK"])
        return float(config["BLOCK"])

    def spills_above_256(config):
        if config["BLOCK"] > 256:
            raise Skipped("spills registers", fallback=config)
        return config

    result = tune("add", CONFIGS, spills_above_256, measure)
    assert result.config == {"BLOCK": 128} and timed == [128, 256]
    assert result.timings["BLOCK=512"] == "spills registers"

    def all_spill(config):
        raise Skipped("spills registers", fallback=config)

    timed.clear()
    result = tune("add", CONFIGS, all_spill, measure)
    assert result.config == {"BLOCK": 128} and timed == [128, 256, 512, 1024]
    assert result.timings == {"BLOCK=128": 128.0, "BLOCK=256": 256.0, "BLOCK=512": 512.0, "BLOCK=1024": 1024.0}


def test_every_configuration_is_timed_quickly_and_the_quickest_few_again_carefully():
    quick = {128: 1.0, 256: 1.1, 512: 1.2, 1024: 3.0}  # the last is too slow to be a finalist
    careful = {128: 1.15, 256: 1.05, 512: 1.1}  # the second was a little unlucky the first time
    seen = []

    def measure(config, timing):
        seen.append((config["BLOCK"], timing))
        return (quick if timing is QUICK else careful)[config["BLOCK"]]

    result = tune("add", CONFIGS, lambda c: c, measure)
    assert result.config == {"BLOCK": 256}
    finalists = [(128, careful_sample(0)), (256, careful_sample(0)), (512, careful_sample(0))] + \
        [(block, careful_sample(1)) for _ in range(CAREFUL.repeat - 1) for block in (128, 256, 512)]
    assert seen == [(128, QUICK), (256, QUICK), (512, QUICK), (1024, QUICK)] + finalists
    assert careful_sample(0) == Timing(warmup=CAREFUL.warmup, repeat=1)
    assert careful_sample(1) == Timing(warmup=0, repeat=1)
    assert result.timings == {"BLOCK=128": 1.15, "BLOCK=256": 1.05, "BLOCK=512": 1.1, "BLOCK=1024": 3.0}


def test_the_finalists_samples_are_taken_in_turn_so_that_falling_clocks_weigh_on_each_alike():
    # A GPU under load slows down as it heats: every careful sample takes a little longer than the one
    # before.  Timed one finalist after another, the first timed (the quickest at first look, 128) would
    # win; sample by sample in turn, the fastest (256) does.
    quick = {128: 1.0, 256: 1.05, 512: 1.1, 1024: 3.0}
    base = {128: 1.0, 256: 0.97, 512: 1.2}
    careful = []

    def measure(config, timing):
        if timing is QUICK:
            return quick[config["BLOCK"]]
        careful.append(config["BLOCK"])
        return base[config["BLOCK"]] * (1 + 0.01 * len(careful))

    result = tune("add", CONFIGS, lambda c: c, measure)
    assert result.config == {"BLOCK": 256}
    assert careful == [128, 256, 512] * CAREFUL.repeat


def test_at_most_a_few_finalists_are_timed_carefully():
    configs = [{"BLOCK": 2 ** i} for i in range(10)]
    careful = []

    def measure(config, timing):
        if timing is not QUICK and config["BLOCK"] not in careful:
            careful.append(config["BLOCK"])
        return 1.0 if timing is QUICK else 2.0 - config["BLOCK"] / 1024

    result = tune("add", configs, lambda c: c, measure)
    assert careful == [1, 2, 4, 8][:FINALISTS]  # equal quick times: the first listed
    assert result.config == {"BLOCK": careful[-1]}


def test_a_finalist_that_fails_when_timed_carefully_is_not_chosen():
    def measure(config, timing):
        if timing is not QUICK and config["BLOCK"] == 128:
            raise LaunchError("kernel 'add' failed: an illegal memory access")
        return 1.0

    result = tune("add", CONFIGS, lambda c: c, measure)
    assert result.config == {"BLOCK": 256}
    assert result.timings["BLOCK=128"] == "kernel 'add' failed: an illegal memory access"


def test_no_runnable_configuration_is_an_error_listing_every_reason():
    def evaluate(config):
        raise Skipped(f"reason {config['BLOCK']}")

    with pytest.raises(LaunchError) as error:
        tune("add", CONFIGS[:2], evaluate, fake_timer({}))
    assert error.value.message == ("add: no configuration can run on this device:\n"
                                   "  BLOCK=128: reason 128\n  BLOCK=256: reason 256")


def phobos_messages(caplog, level=logging.DEBUG) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("phobos") and r.levelno >= level]


def test_progress_is_logged_for_more_than_three_configurations(caplog):
    caplog.set_level(logging.INFO, logger="phobos")
    tune("add", CONFIGS, lambda c: c, fake_timer({128: 4.0, 256: 3.0, 512: 2.0, 1024: 1.0}))
    first, last = phobos_messages(caplog)
    assert first == "tuning add over 4 configurations..."
    assert re.fullmatch(r"tuning add over 4 configurations: best BLOCK=1024: 1 ms \(\d+\.\d s\)", last)
    caplog.clear()
    tune("add", CONFIGS[:3], lambda c: c, lambda c, timing: 1.0)
    assert phobos_messages(caplog) == []


def test_the_autotune_report_is_logged_at_debug(caplog):
    caplog.set_level(logging.DEBUG, logger="phobos")

    def evaluate(config):
        if config["BLOCK"] == 128:
            raise Skipped("needs 300000 bytes of shared memory")
        return config

    tune("add", CONFIGS[:2], evaluate, fake_timer({256: 2.5}))
    skipped, timed, choice = phobos_messages(caplog)
    assert skipped == "tuning add: BLOCK=128: skipped: needs 300000 bytes of shared memory"
    assert timed == "tuning add: BLOCK=256: 2.5 ms"
    assert choice.startswith("tuning add over 2 configurations: best BLOCK=256: 2.5 ms")
    assert phobos_messages(caplog, logging.INFO) == []  # two configurations: no progress lines


def test_configuration_names():
    assert config_text({"TILE_M": 64, "TILE_N": 128}) == "TILE_M=64, TILE_N=128"
    assert config_text({}) == "no autotune parameters"


# --- screening


@pytest.fixture(scope="module")
def add_1024():
    return compile(ADD4, config={"BLOCK": 1024})  # 256 threads


def report(registers=32, spill_stores=0, spill_loads=0, ok=True, errors=()) -> Report:
    return Report("sm_90", "add", ok, [KernelReport("add", registers, spill_stores, spill_loads)], list(errors))


def screened(kernel, device=FAKE_DEVICE, ptxas=None) -> str | None:
    try:
        screen(kernel, device, lambda: ptxas)
    except Skipped as skipped:
        return skipped.reason
    return None


def test_a_kernel_within_every_limit_passes(add_1024):
    assert screened(add_1024, ptxas=report()) is None
    assert screened(add_1024) is None


def test_shared_memory_and_threads_beyond_the_device(add_1024):
    needy = replace(add_1024, shared_bytes=200_000)
    small = replace(FAKE_DEVICE, max_shared_bytes_per_block=100_000, max_threads_per_block=64)
    assert screened(needy, small) == "needs 200000 bytes of shared memory; Fake GPU allows 100000 per block"
    assert screened(add_1024, small) == "needs 256 threads per block; Fake GPU allows 64"


def test_registers_from_ptxas(add_1024):
    assert screened(add_1024, ptxas=report(registers=600)) == (
        "uses 600 registers per thread; 256 threads may use at most 256")
    assert screened(add_1024, ptxas=report(ok=False, errors=[PtxasDiagnostic("add", 3, "syntax error")])) == (
        "ptxas rejected it: syntax error")


def test_spills_leave_a_fallback(add_1024):
    with pytest.raises(Skipped) as skipped:
        screen(add_1024, FAKE_DEVICE, lambda: report(spill_stores=8, spill_loads=16))
    assert skipped.value.reason == "spills registers (8 bytes stored, 16 bytes loaded)"
    assert skipped.value.fallback is add_1024


def test_registers_from_the_compiler_estimate_without_ptxas(add_1024):
    budget = add_1024.registers_estimate - 1
    tiny = replace(FAKE_DEVICE, max_registers_per_block=256 * budget)
    assert screened(add_1024, tiny) == (
        f"the compiler estimates {add_1024.registers_estimate} registers per thread; 256 threads may use at most "
        f"{budget}")


def test_estimates_far_beyond_the_limits_are_skipped_without_asking_ptxas(add_1024):
    asked = []

    def ptxas():
        asked.append(True)
        return report()

    def reason(kernel, device=FAKE_DEVICE):
        try:
            screen(kernel, device, ptxas)
        except Skipped as skipped:
            return skipped.reason

    assert reason(replace(add_1024, registers_estimate=510)) is None and len(asked) == 1
    assert reason(replace(add_1024, registers_estimate=1555)) == (
        "the compiler estimates 1555 registers per thread, more than 2 times the 255 a thread can have; "
        "not assembled")
    small = replace(FAKE_DEVICE, max_registers_per_block=256 * 100)
    assert reason(replace(add_1024, registers_estimate=201), small) == (
        "the compiler estimates 201 registers per thread, more than 2 times the 100 each of 256 threads may "
        "use; not assembled")
    assert reason(replace(add_1024, shared_bytes=10**6)).startswith("needs 1000000 bytes of shared memory")
    assert len(asked) == 1


HUGE_ROW = """\
@autotune(BN in [1048576, 1024], WARPS in [4])
kernel rownorm(x: tensor<f32>[M, N], y: tensor<f32>[M, N]) {
    let xs = x[program_id(0), 0 :+ BN]
    y[program_id(0), 0 :+ BN] = xs / sum(xs)
}
"""


def test_a_tile_of_absurd_register_need_is_refused_before_any_code_is_written():
    with pytest.raises(ResourceError) as error:
        compile(HUGE_ROW, config={"BN": 1048576}, filename="rownorm.phobos")
    assert error.value.message == (
        "a tile<f32>[1048576] takes 8192 registers per thread with 128 threads; a thread has 255, and at most "
        "1024 (the rest spilled to memory) are accepted: use more WARPS or a smaller tile")
    assert (error.value.loc.line, error.value.loc.col) == (3, 15)
    assert compile(HUGE_ROW, config={"BN": 1024}).threads == 128


def test_the_tuner_skips_such_a_tile_without_running_ptxas(monkeypatch):
    assembled = []

    def fake_report(self, compiled, required=False):
        assembled.append(compiled.config["BN"])
        return Report("sm_90", "rownorm", True, [KernelReport("rownorm", 40, 0, 0)])

    monkeypatch.setattr(launcher._Kernel, "ptxas_report", fake_report)
    rownorm = phobos.kernel(HUGE_ROW, mode=FakeGpu())
    rownorm(np.ones((2, 100), np.float32), np.zeros((2, 100), np.float32))
    assert assembled == [1024] and rownorm.config == {"BN": 1024, "WARPS": 4}
    assert rownorm.timings["BN=1048576, WARPS=4"].startswith("a tile<f32>[1048576] takes 8192 registers")


# --- tuning inside the launcher


TIMES = {"BLOCK=128": 4.0, "BLOCK=256": 0.5, "BLOCK=512": 2.0, "BLOCK=1024": 3.0}


def call_add(add, n: int = 1000):
    a, b = random_vectors(n)
    c = np.full(n, 7.0, np.float32)
    add(a, b, c)
    return a, b, c


def test_the_launcher_tunes_then_launches_the_fastest_on_the_real_arguments(caplog):
    gpu = FakeGpu(TIMES)
    add = phobos.kernel(ADD4, mode=gpu)
    a, b, c = call_add(add)
    assert gpu.timed_configs() == CONFIGS
    assert add.config == {"BLOCK": 256} and add.timings == TIMES
    (run,) = gpu.runs
    assert run.compiled.config == {"BLOCK": 256} and run.grid == (4, 1, 1)
    assert run.ptx_arguments()[:3] == [a, b, c] and run.replacements == {}
    assert any(m.startswith("tuning add over 4 configurations: best BLOCK=256: 0.5 ms") for m in phobos_messages(caplog))


def test_timing_runs_use_scratch_copies_never_the_callers_buffers():
    gpu = FakeGpu(TIMES)
    add = phobos.kernel(ADD4, mode=gpu)
    a, b, c = call_add(add)
    copies = {copy.tensor.param.name: copy for copy in gpu.copies}
    assert set(copies) == {"a", "b", "c"}  # host arrays go to the device once; c is written
    assert copies["c"].tensor.source is c
    for launch in gpu.timed:
        arguments = launch.ptx_arguments()
        assert arguments[:3] == [copies["a"], copies["b"], copies["c"]]
        assert not any(argument is c for argument in arguments)
        assert launch.copy_back() == []
    assert gpu.freed == gpu.copies
    assert (c == 7.0).all()  # the fake ran nothing, and nothing copied anything back


def test_device_inputs_are_timed_in_place_and_written_device_tensors_on_copies():
    gpu = FakeGpu(TIMES)
    a, b, c = DeviceArray((1000,), address=0x1000), DeviceArray((1000,), address=0x2000), \
        DeviceArray((1000,), address=0x3000)
    phobos.kernel(ADD4, mode=gpu)(a, b, c)
    (scratch,) = gpu.copies
    assert scratch.tensor.param.name == "c" and scratch.tensor.pointer == 0x3000
    assert all(launch.ptx_arguments()[:3] == [0x1000, 0x2000, scratch] for launch in gpu.timed)
    assert gpu.runs[0].ptx_arguments()[:3] == [0x1000, 0x2000, 0x3000]


def test_the_choice_is_remembered_per_sizes():
    gpu = FakeGpu(TIMES)
    add = phobos.kernel(ADD4, mode=gpu)
    call_add(add)
    call_add(add)
    assert len(gpu.timed) == 4 and len(gpu.runs) == 2
    call_add(add, 2000)
    assert len(gpu.timed) == 8


def test_another_process_finds_the_choice_on_disk(monkeypatch):
    forget_memory(monkeypatch)
    call_add(phobos.kernel(ADD4, mode=FakeGpu(TIMES)))
    forget_memory(monkeypatch)
    monkeypatch.setattr(launcher, "compile_kernel", lambda *a, **k: pytest.fail("compiled again"))
    gpu = FakeGpu({"BLOCK=1024": 0.1})
    add = phobos.kernel(ADD4, mode=gpu)
    call_add(add)
    assert gpu.timed == [] and add.config == {"BLOCK": 256} and add.timings == TIMES


def test_a_different_device_is_tuned_anew():
    call_add(phobos.kernel(ADD4, mode=FakeGpu(TIMES)))
    other = FakeGpu({"BLOCK=1024": 0.1}, props=replace(FAKE_DEVICE, name="Other GPU"))
    add = phobos.kernel(ADD4, mode=other)
    call_add(add)
    assert len(other.timed) == 4 and add.config == {"BLOCK": 1024}


def tuned_with(grid, gpu, n=1000):
    add = phobos.kernel(ADD4, mode=gpu)
    a, b = random_vectors(n)
    add[grid](a, b, np.empty_like(a))
    return add.config


def blocks_of(width):
    return lambda config, sizes: (-(-sizes["N"] // config["BLOCK"]) * width,)


def test_grid_functions_are_told_apart_by_their_code_and_values_not_their_name(monkeypatch):
    ceil = FakeGpu(TIMES)
    assert tuned_with(lambda config, sizes: (-(-sizes["N"] // config["BLOCK"]),), ceil) == {"BLOCK": 256}
    one = FakeGpu({"BLOCK=1024": 0.1})  # another lambda: its own choice, in memory and on disk
    assert tuned_with(lambda config, sizes: (1,), one) == {"BLOCK": 1024} and len(one.timed) == 4
    twice = FakeGpu({"BLOCK=512": 0.1})  # the same code reading another value from its closure
    assert tuned_with(blocks_of(2), twice) == {"BLOCK": 512} and len(twice.timed) == 4
    forget_memory(monkeypatch)
    again = FakeGpu({"BLOCK=128": 0.1})  # the same functions made anew, as in another process: found on disk
    assert tuned_with(lambda config, sizes: (-(-sizes["N"] // config["BLOCK"]),), again) == {"BLOCK": 256}
    assert tuned_with(lambda config, sizes: (1,), again) == {"BLOCK": 1024}
    assert tuned_with(blocks_of(2), again) == {"BLOCK": 512} and again.timed == []
    assert tuned_with(blocks_of(3), again) == {"BLOCK": 128} and len(again.timed) == 4
    assert len(list((cache.cache_dir() / cache.AUTOTUNE).iterdir())) == 4


def test_a_grid_function_reading_an_object_is_known_by_its_grids_and_not_kept_on_disk():
    widths = np.array([1, 2])
    reads_an_array = lambda config, sizes: (int(widths[0]) * -(-sizes["N"] // config["BLOCK"]),)  # noqa: E731
    assert launcher.function_digest(reads_an_array) is None
    assert launcher.function_digest(blocks_of(2)) != launcher.function_digest(blocks_of(3))
    assert launcher.function_digest(blocks_of(2)) == launcher.function_digest(blocks_of(2))
    gpu = FakeGpu({"BLOCK=512": 0.1})
    add = phobos.kernel(ADD4, mode=gpu)[reads_an_array]
    a, b = random_vectors(1000)
    add(a, b, np.empty_like(a))
    assert add.config == {"BLOCK": 512} and len(gpu.timed) == 4
    add(a, b, np.empty_like(a))
    assert len(gpu.timed) == 4  # remembered in memory
    widths[0] = 2  # now it gives other grids: chosen anew
    add(a, b, np.empty_like(a))
    assert len(gpu.timed) == 8
    assert not (cache.cache_dir() / cache.AUTOTUNE).exists()


def test_a_corrupt_choice_on_disk_is_ignored_and_replaced(isolated_cache, monkeypatch):
    call_add(phobos.kernel(ADD4, mode=FakeGpu(TIMES)))
    (entry,) = (isolated_cache / cache.AUTOTUNE).iterdir()
    entry.write_text(entry.read_text().replace('"BLOCK": 256', '"BLOCK": 999'))
    forget_memory(monkeypatch)
    gpu = FakeGpu({"BLOCK=512": 0.1})
    add = phobos.kernel(ADD4, mode=gpu)
    call_add(add)
    assert len(gpu.timed) == 4 and add.config == {"BLOCK": 512}
    assert '"BLOCK": 512' in entry.read_text()


def test_phobos_autotune_0_takes_the_first_configuration(monkeypatch):
    monkeypatch.setenv("PHOBOS_AUTOTUNE", "0")
    gpu = FakeGpu(TIMES)
    add = phobos.kernel(ADD4, mode=gpu)
    call_add(add)
    assert gpu.timed == [] and add.config == {"BLOCK": 128}
    assert add.timings == {"BLOCK=128": "not timed: PHOBOS_AUTOTUNE=0 runs the first configuration that serves the call"}


def test_a_forced_configuration_is_not_tuned():
    gpu = FakeGpu(TIMES)
    add = phobos.kernel(ADD4, mode=gpu).configure(BLOCK=1024)
    call_add(add)
    assert gpu.timed == [] and add.config == {"BLOCK": 1024}


def test_partly_forced_configurations_tune_the_rest():
    gpu = FakeGpu({"BLOCK=128, ROWS=2": 2.0, "BLOCK=256, ROWS=2": 1.0})
    scale = phobos.kernel(TWO_PARAMETERS, mode=gpu).configure(ROWS=2)
    x, y = random_vectors(1000)
    scale(x, y, 2.0)
    assert gpu.timed_configs() == [{"BLOCK": 128, "ROWS": 2}, {"BLOCK": 256, "ROWS": 2}]
    assert scale.config == {"BLOCK": 256, "ROWS": 2}


def test_configurations_that_cannot_run_are_skipped_with_the_reason():
    gpu = FakeGpu(TIMES, props=replace(FAKE_DEVICE, max_threads_per_block=64))
    add = phobos.kernel(ADD4, mode=gpu)
    call_add(add)
    assert gpu.timed_configs() == CONFIGS[:2]
    assert add.timings["BLOCK=512"] == "needs 128 threads per block; Fake GPU allows 64"
    assert add.timings["BLOCK=1024"] == "needs 256 threads per block; Fake GPU allows 64"
    assert add.config == {"BLOCK": 256}


def test_when_no_configuration_can_run_nothing_runs():
    gpu = FakeGpu(TIMES, props=replace(FAKE_DEVICE, max_threads_per_block=16))
    with pytest.raises(LaunchError, match=r"add: no configuration can run on this device:\n  BLOCK=128: needs 32"):
        call_add(phobos.kernel(ADD4, mode=gpu))
    assert gpu.runs == [] and gpu.copies == []


def test_register_reports_come_from_ptxas_when_there_is_one(monkeypatch):
    reports = []

    def fake_report(self, compiled, required=False):
        reports.append(compiled.config)
        registers = 600 if compiled.config["BLOCK"] == 512 else 20  # 128 threads may use 256
        return Report("sm_90", "add", True, [KernelReport("add", registers, 0, 0)])

    monkeypatch.setattr(launcher._Kernel, "ptxas_report", fake_report)
    gpu = FakeGpu(TIMES, props=replace(FAKE_DEVICE, max_registers_per_block=65536 // 2))
    add = phobos.kernel(ADD4, mode=gpu)
    call_add(add)
    assert reports == CONFIGS
    assert add.timings["BLOCK=512"] == "uses 600 registers per thread; 128 threads may use at most 256"


def test_a_ptxas_that_takes_too_long_skips_its_configuration(monkeypatch, tmp_path, fresh_ptxas_lookup):
    slow = tmp_path / "ptxas"
    slow.write_text("#!/bin/sh\nexec sleep 60\n")
    slow.chmod(0o755)
    monkeypatch.setenv("PHOBOS_PTXAS", str(slow))
    monkeypatch.setenv("PHOBOS_PTXAS_TIMEOUT", "0.2")
    gpu = FakeGpu(TIMES)
    add = phobos.kernel(ADD4, mode=gpu)
    with pytest.raises(LaunchError) as error:
        call_add(add)
    assert gpu.runs == []
    for config in CONFIGS:
        assert f"  {config_text(config)}: ptxas took longer than 0.2 s on " in error.value.message
    assert error.value.message.count("; not assembled (PHOBOS_PTXAS_TIMEOUT sets the limit, in seconds)") == 4
    assert not list((cache.cache_dir() / cache.PTXAS).glob("*.json"))  # a timeout is not remembered


def test_a_slow_ptxas_on_one_configuration_leaves_the_others(monkeypatch):
    def fake_report(self, compiled, required=False):
        if compiled.config["BLOCK"] == 256:
            raise PtxasTimeout("ptxas took longer than 60 s on add.phobos [add: BLOCK=256]; not assembled")
        return Report("sm_90", "add", True, [KernelReport("add", 20, 0, 0)])

    monkeypatch.setattr(launcher._Kernel, "ptxas_report", fake_report)
    gpu = FakeGpu(TIMES)
    add = phobos.kernel(ADD4, mode=gpu)
    call_add(add)
    assert add.timings["BLOCK=256"] == "ptxas took longer than 60 s on add.phobos [add: BLOCK=256]; not assembled"
    assert add.config == {"BLOCK": 512}


def test_an_empty_launch_tunes_nothing():
    gpu = FakeGpu(TIMES)
    add = phobos.kernel(ADD4, mode=gpu)
    call_add(add, 0)
    assert gpu.timed == [] and gpu.runs == [] and gpu.copies == []
    assert add.timings == {"BLOCK=128": "not timed: the grid is empty, so nothing runs"}


def test_cpu_backends_do_not_tune(monkeypatch):
    interpreter = install_cpu_module(monkeypatch, "phobos.run.interpreter", "run")
    add = phobos.kernel(ADD4, mode="interpret")
    call_add(add)
    assert add.config == {"BLOCK": 128} and len(interpreter.calls) == 1
    assert add.timings == {"BLOCK=128": "not timed: mode 'interpret' runs the first configuration that serves the "
                                        "call and fits sm_90 (only mode 'gpu' times them)"}


def test_scratch_copies_are_freed_when_timing_fails():
    class FailingGpu(FakeGpu):
        def time(self, launch, warmup, repeat):
            raise KeyboardInterrupt

    gpu = FailingGpu(TIMES)
    with pytest.raises(KeyboardInterrupt):
        call_add(phobos.kernel(ADD4, mode=gpu))
    assert len(gpu.copies) == 3 and gpu.freed == gpu.copies

