# Kernels called like functions, on a real GPU (skipped with the reason where
# there is none): add and sgemm from numpy arrays, torch and CuPy tensors and
# PyCUDA GPUArrays, ragged sizes, read-modify-write of C while the autotuner
# times configurations, and the disk cache seen from a second process.
# `pytest -m gpu -s tests/test_launcher_gpu.py` prints first-call and cached-call times.
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import phobos
from phobos.launch import cache
from phobos.run import runtime
from phobos.errors import ToolchainError
from phobos.launch.launcher import benchmark
from phobos.frontend.sema import configurations
from phobos.toolchain import find_ptxas

from .launcher_fakes import forget_memory

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"
ALPHA, BETA = 1.5, 0.5


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def vectors(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    r = rng(seed)
    return r.standard_normal(n, dtype=np.float32), r.standard_normal(n, dtype=np.float32)


def matrices(M: int, K: int, N: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r = rng(seed)
    return (r.standard_normal((M, K), dtype=np.float32), r.standard_normal((K, N), dtype=np.float32),
            r.standard_normal((M, N), dtype=np.float32))


def sgemm_reference(A, B, C0) -> np.ndarray:
    return ALPHA * (np.asarray(A, np.float64) @ np.asarray(B, np.float64)) + BETA * np.asarray(C0, np.float64)


def assert_sgemm_close(C, expected, K: int) -> None:
    np.testing.assert_allclose(np.asarray(C, np.float64), expected, rtol=1e-4, atol=2e-5 * K)


@pytest.fixture
def add():
    return phobos.load(EXAMPLES / "add.phobos", mode="gpu").add


@pytest.fixture
def sgemm():
    return phobos.load(EXAMPLES / "sgemm.phobos", mode="gpu").sgemm


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


# --- add


@pytest.mark.parametrize("n", [1, 1000, 1024, 2**20 + 3])
def test_add_from_numpy(add, n):
    a, b = vectors(n, n)
    c = np.full(n, np.nan, np.float32)
    a_before = a.copy()
    add(a, b, c)
    np.testing.assert_array_equal(c, a + b)
    np.testing.assert_array_equal(a, a_before)


def test_add_of_empty_arrays_launches_nothing(add):
    empty = np.empty(0, np.float32)
    add(empty, empty, empty.copy())
    assert add.config == {"BLOCK": 1024}


@pytest.mark.parametrize("n", [1, 1000, 2**20 + 3])
def test_add_from_torch(add, torch, n):
    a, b = (torch.from_numpy(x).cuda() for x in vectors(n, n))
    c = torch.full((n,), float("nan"), device="cuda")
    add(a, b, c)
    assert torch.equal(c, a + b)


def test_add_from_cpu_torch_tensors_writes_them_in_place(add, torch):
    a, b = (torch.from_numpy(x) for x in vectors(1000))
    c = torch.zeros(1000)
    add(a, b, c)
    assert torch.equal(c, a + b)


def test_add_from_cupy(add):
    cupy = pytest.importorskip("cupy")
    a, b = (cupy.asarray(x) for x in vectors(5000))
    c = cupy.empty_like(a)
    add(a, b, c)
    assert bool((c == a + b).all())


def test_add_from_gpuarrays(add):
    gpuarray = pytest.importorskip("pycuda.gpuarray")
    assert runtime.gpu_available()[0]  # makes the primary context current, which GPUArrays allocate in
    a_host, b_host = vectors(3000)
    a, b = gpuarray.to_gpu(a_host), gpuarray.to_gpu(b_host)
    c = gpuarray.empty_like(a)
    add(a, b, c)
    np.testing.assert_array_equal(c.get(), a_host + b_host)


def test_bf16_tensors_from_torch(torch):
    convert = phobos.kernel("""
        kernel widen(x: tensor<bf16>[N], y: tensor<f32>[N]) {
            let base = program_id(0) * 256
            y[base :+ 256] = x[base :+ 256]
        }""", mode="gpu")
    x = torch.randn(1000, device="cuda").to(torch.bfloat16)
    y = torch.empty(1000, device="cuda")
    convert(x, y)
    assert torch.equal(y, x.float())


def test_bad_arguments_fail_before_the_gpu_is_touched(sgemm):
    A, B, C = matrices(64, 32, 48)
    with pytest.raises(phobos.PhobosError, match=r"argument 'B': expected a 2-D f32 tensor \[K, N\] with K = 32"):
        sgemm(A, B[:31], C, alpha=1.0, beta=0.0)
    add = phobos.load(EXAMPLES / "add.phobos", mode="gpu").add
    a, b = vectors(100)
    c = np.empty_like(a)
    add(a, b, c)
    np.testing.assert_array_equal(c, a + b)  # the context is healthy


# --- sgemm: tuning must not touch C


@pytest.mark.parametrize("M, K, N", [(64, 64, 64), (100, 70, 130), (1, 1, 1), (257, 129, 65)])
def test_sgemm_from_numpy_with_read_modify_write_of_c(sgemm, M, K, N):
    A, B, C = matrices(M, K, N, M + K + N)
    C0 = C.copy()
    sgemm(A, B, C, alpha=ALPHA, beta=BETA)  # the first call for these sizes tunes
    assert_sgemm_close(C, sgemm_reference(A, B, C0), K)
    assert sgemm.config in configurations_of_sgemm()
    assert len(sgemm.timings) == len(configurations_of_sgemm())
    assert any(isinstance(ms, float) for ms in sgemm.timings.values())


def configurations_of_sgemm() -> list[dict[str, int]]:
    from phobos.compiler import parse_source
    source = (EXAMPLES / "sgemm.phobos").read_text()
    return configurations(parse_source(source, str(EXAMPLES / "sgemm.phobos")).kernels[0])


@pytest.mark.parametrize("M, K, N", [(128, 64, 256), (100, 70, 130)])
def test_sgemm_from_torch_with_read_modify_write_of_c(sgemm, torch, M, K, N):
    A, B, C = (torch.from_numpy(x).cuda() for x in matrices(M, K, N, 7))
    C0 = C.cpu().numpy().copy()
    sgemm(A, B, C, ALPHA, beta=BETA)
    assert_sgemm_close(C.cpu().numpy(), sgemm_reference(A.cpu().numpy(), B.cpu().numpy(), C0), K)
    assert sgemm.timings  # tuned, on scratch copies of C


def test_a_forced_configuration(sgemm):
    A, B, C = matrices(200, 96, 300)
    C0 = C.copy()
    forced = sgemm.configure(TILE_M=128, TILE_N=64, TILE_K=16)
    forced(A, B, C, alpha=ALPHA, beta=BETA)
    assert forced.config == {"TILE_M": 128, "TILE_N": 64, "TILE_K": 16}
    assert forced.timings == {"TILE_M=128, TILE_N=64, TILE_K=16": "not timed: the only configuration that serves "
                                                                  "the call"}
    assert_sgemm_close(C, sgemm_reference(A, B, C0), 96)


def test_ptxas_report_of_what_ran(sgemm):
    try:
        find_ptxas()
    except ToolchainError as error:
        pytest.skip(error.message)
    A, B, C = matrices(64, 32, 64)
    sgemm(A, B, C, alpha=ALPHA, beta=BETA)
    report = sgemm.ptxas
    assert report.ok and report.arch == sgemm.compiled.arch
    assert report.kernel("sgemm").registers > 0


def test_an_explicit_grid_function(sgemm):
    A, B, C = matrices(96, 32, 200)
    C0 = C.copy()

    def grid(config, sizes):
        return (-(-sizes["M"] // config["TILE_M"]), -(-sizes["N"] // config["TILE_N"]))

    sgemm[grid](A, B, C, alpha=ALPHA, beta=BETA)
    assert_sgemm_close(C, sgemm_reference(A, B, C0), 32)


# --- the disk cache, seen from another process

SECOND_PROCESS = """
import json, sys, time
import numpy as np
import phobos
from phobos.launch import launcher
from phobos.run import runtime

def refuse(*args, **kwargs):
    raise AssertionError("a process that finds the choice in the cache must not compile or time anything")

runtime.time_launch = refuse
launcher.compile_kernel = refuse
M, K, N = (int(v) for v in sys.argv[1:4])
rng = np.random.default_rng(5)
A = rng.standard_normal((M, K), dtype=np.float32)
B = rng.standard_normal((K, N), dtype=np.float32)
C = rng.standard_normal((M, N), dtype=np.float32)
expected = 1.5 * (A.astype(np.float64) @ B.astype(np.float64)) + 0.5 * C.astype(np.float64)
sgemm = phobos.load(sys.argv[4], mode="gpu").sgemm
start = time.perf_counter()
sgemm(A, B, C, alpha=1.5, beta=0.5)
seconds = time.perf_counter() - start
ok = bool(np.allclose(C, expected, rtol=1e-4, atol=2e-5 * K))
print(json.dumps({"config": sgemm.config, "timings": sgemm.timings, "seconds": seconds, "ok": ok}))
"""


def test_a_second_process_finds_the_tuned_kernel_in_the_disk_cache(sgemm, monkeypatch, isolated_cache):
    forget_memory(monkeypatch)
    M, K, N = 513, 257, 769
    A, B, C = matrices(M, K, N, 3)
    start = time.perf_counter()
    sgemm(A, B, C, alpha=ALPHA, beta=BETA)
    first_call = time.perf_counter() - start
    start = time.perf_counter()
    sgemm(A, B, C, alpha=ALPHA, beta=BETA)
    second_call = time.perf_counter() - start
    assert len(list((isolated_cache / cache.AUTOTUNE).iterdir())) == 1

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", SECOND_PROCESS, str(M), str(K), str(N),
                           str(EXAMPLES / "sgemm.phobos")], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    other = json.loads(done.stdout.splitlines()[-1])
    assert other["ok"] and other["config"] == sgemm.config and other["timings"] == sgemm.timings
    assert "tuning" not in done.stderr
    print(f"\nsgemm {M}x{K}x{N}: first call {first_call:.2f} s (compiling and tuning "
          f"{len(sgemm.timings)} configurations), second call {second_call * 1e3:.1f} ms, first call in a new "
          f"process {other['seconds'] * 1e3:.1f} ms (PTX and choice from the disk cache); chose {sgemm.config}")


# --- what the launcher needs of the runtime


def test_device_properties():
    properties = runtime.device_properties()
    assert properties.name and properties.compute_capability >= (7, 5)
    assert properties.max_shared_bytes_per_block >= 48 * 1024
    assert properties.max_registers_per_block >= 65536 and properties.max_threads_per_block >= 1024


def test_device_copies_hold_the_data(add_ptx_path):
    a, b = vectors(1000)
    copies = [runtime.device_copy(a), runtime.device_copy(b)]
    copies.append(runtime.device_copy(int(copies[1]), b.nbytes))  # device to device
    c = np.empty_like(a)
    try:
        runtime.launch(add_ptx_path.read_text(), "add", 4, 256, [copies[0], copies[2], c, 1000])
    finally:
        for copy in copies:
            copy.free()
    np.testing.assert_array_equal(c, a + b)


def test_benchmark_measures_milliseconds(add):
    a, b = vectors(2**20)
    c = np.empty_like(a)
    ms = benchmark(lambda: add(a, b, c), warmup=1, repeat=3)
    assert 0 < ms < 10_000


@pytest.mark.parametrize("script", ["add.py", "sgemm.py", "softmax.py", "layernorm.py", "row_sum.py",
                                    "vector_sum.py", "attention.py"])
def test_examples_run_on_the_gpu(script):
    done = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "mode = gpu" in done.stdout and "ok" in done.stdout and "time:" in done.stdout
    print("\n" + done.stdout)
