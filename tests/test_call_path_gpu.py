# The documented call on a real GPU (skipped with the reason where there is
# none): asynchronous launches ordered with torch's work on its current stream
# and on side streams, the stream= argument, CuPy's current stream, CUDA graph
# capture and replay, torch.compile through phobos.torch_op, JAX arrays through
# DLPack, tensors on a second device, how a fault of an asynchronous kernel is
# reported, the cubin loaded after tuning, and in-place calls (a tensor both read
# and written) run code that does not read through the read-only cache.
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import phobos
from phobos.errors import LaunchError

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


@pytest.fixture
def add():
    return phobos.load(EXAMPLES / "add.phobos", mode="gpu").add


def run_script(script: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)


# --- ordering with torch, streams


def test_calls_are_ordered_with_torchs_work_on_its_current_stream(add, torch):
    n = 1 << 22
    for _ in range(3):  # the first call takes the full path, the others the prepared one
        a = torch.randn(n, device="cuda")
        b = a * 2  # queued by torch, not waited for
        c = torch.empty_like(a)
        add(a, b, c)  # queued behind it
        d = c + 1  # queued behind the kernel
        assert torch.allclose(d, 3 * a + 1)


def test_calls_follow_torch_cuda_stream(add, torch):
    side = torch.cuda.Stream()
    n = 1 << 22
    a = torch.randn(n, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            b = a * 3
            c = torch.empty_like(a)
            add(a, b, c)
            d = c * 2
    side.synchronize()
    assert torch.allclose(d, 8 * a)


def test_the_stream_argument(add, torch):
    side = torch.cuda.Stream()
    a, b = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
    c = torch.empty_like(a)
    torch.cuda.synchronize()
    add(a, b, c, stream=side)
    side.synchronize()
    assert torch.equal(c, a + b)
    add(a, b, c, stream=side.cuda_stream)  # a raw handle
    side.synchronize()
    with pytest.raises(LaunchError, match="stream: expected a CUDA stream"):
        add(a, b, c, stream="side")


def test_cupy_arrays_run_on_cupys_current_stream(add):
    cupy = pytest.importorskip("cupy")
    n = 1 << 20
    with cupy.cuda.Stream(non_blocking=True) as stream:
        for _ in range(3):
            a = cupy.random.standard_normal(n, dtype=cupy.float32)
            b = a * 2
            c = cupy.empty_like(a)
            add(a, b, c)
            d = c + 1
        stream.synchronize()
    assert bool(cupy.allclose(d, 3 * a + 1))


def test_numpy_calls_wait_and_copy_back(add):
    a, b = np.ones(1000, np.float32), np.full(1000, 2, np.float32)
    c = np.zeros_like(a)
    add(a, b, c)
    assert (c == 3).all()


def test_the_tenth_call_checks_like_the_first(add, torch):
    a, b, c = (torch.randn(4096, device="cuda") for _ in range(3))
    for _ in range(9):
        add(a, b, c)
    with pytest.raises(LaunchError, match=r"argument 'c': expected a 1-D f32 tensor \[N\] with N = 4096"):
        add(a, b, torch.randn(4095, device="cuda"))
    strided = torch.zeros(8192, device="cuda")[::2]  # a view taken as it lies, through its stride
    add(a, b, strided)
    assert torch.equal(strided, a + b)
    with pytest.raises(LaunchError, match="its elements overlap"):
        add(a, b, torch.zeros(1, device="cuda").expand(4096))  # a written view whose elements overlap
    with pytest.raises(LaunchError, match="got torch.float16 tensor"):
        add(a, b, c.half())


# --- CUDA graphs


def test_a_call_captured_in_a_cuda_graph_replays(add, torch):
    n = 1 << 20
    a, b, c = (torch.zeros(n, device="cuda") for _ in range(3))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        add(a, b, c)  # warm-up: compiles, tunes, prepares
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        add(a, b, c)
        c.mul_(2)
    for _ in range(3):
        a.copy_(torch.randn(n, device="cuda"))
        b.copy_(torch.randn(n, device="cuda"))
        graph.replay()
        assert torch.allclose(c, 2 * (a + b))


def test_tuned_row_kernels_captured_in_a_cuda_graph_replay_on_new_data(torch):
    """The documented calls of tuned kernels (positional: the written-out call; with a keyword: the probing
    path), recorded by torch.cuda.graph and replayed after the inputs change."""
    softmax = phobos.load(EXAMPLES / "softmax.phobos", mode="gpu").softmax
    layernorm = phobos.load(EXAMPLES / "layernorm.phobos", mode="gpu").layernorm
    x = torch.randn(4096, 1000, device="cuda")
    w, b = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    y, z = torch.empty_like(x), torch.empty_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: tunes, compiles, prepares
        softmax(x, y)
        layernorm(x, w, b, z, eps=1e-5)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        softmax(x, y)
        layernorm(x, w, b, z, eps=1e-5)
    for _ in range(3):
        x.copy_(torch.randn_like(x) * 3)
        graph.replay()
        torch.cuda.synchronize()
        assert (y - torch.softmax(x, 1)).abs().max().item() < 1e-6
        assert (z - torch.nn.functional.layer_norm(x, (1000,), w, b, 1e-5)).abs().max().item() < 1e-4


def test_numpy_arguments_and_first_calls_during_capture_are_errors(add, torch):
    graph = torch.cuda.CUDAGraph()
    x = np.ones(1000, np.float32)
    first = phobos.load(EXAMPLES / "add.phobos", mode="gpu").add
    t = torch.ones(1000, device="cuda")
    add(t, t, torch.empty_like(t))  # the driver and the device are set up before capture
    errors = []
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        for call in (lambda: add(x, x, x.copy()), lambda: first(t, t, t)):
            try:
                call()
            except LaunchError as error:
                errors.append(error.message)
    assert "argument 'a' is host memory" in errors[0] and "CUDA graph" in errors[0]
    assert "first call with these argument types" in errors[1]


# --- torch.compile


def test_torch_compile_through_a_custom_op(add, torch):
    op = phobos.torch_op(add, name="phobos_gpu_test::add")

    def f(a, b):
        c = torch.empty_like(a)
        op(a, b, c)
        return torch.relu(c) * 2

    a, b = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
    compiled = torch.compile(f, fullgraph=True)
    for _ in range(2):
        assert torch.allclose(compiled(a, b), torch.relu(a + b) * 2)
    with pytest.raises(Exception, match="argument 'b': expected a 1-D f32 tensor"):
        compiled(a, b.double())


# --- JAX through DLPack


def test_jax_arrays_through_dlpack(add, torch):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("JAX sees no GPU")
    a = jax.device_put(jax.numpy.arange(4096, dtype=jax.numpy.float32), gpus[0])
    b = (a * 2).block_until_ready()  # JAX has no current stream to order with
    c = torch.empty(4096, device="cuda")
    add(a, b, c)
    torch.cuda.synchronize()
    assert torch.equal(c.cpu(), torch.arange(4096, dtype=torch.float32) * 3)
    on_cpu = jax.device_put(jax.numpy.zeros(4096, jax.numpy.float32), jax.devices("cpu")[0])
    with pytest.raises(LaunchError, match=r"argument 'b': .* in host memory \(cpu\)"):
        add(a, on_cpu, c)


# --- devices


def test_tensors_on_a_second_device_run_there(torch):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    add = phobos.load(EXAMPLES / "add.phobos", mode="gpu").add
    for device in ("cuda:1", "cuda:0", "cuda:1"):
        a, b = torch.randn(1 << 20, device=device), torch.randn(1 << 20, device=device)
        c = torch.empty_like(a)
        add(a, b, c)
        assert torch.equal(c, a + b)
    with pytest.raises(LaunchError, match="argument 'b' is on cuda:0, but 'a' is on cuda:1"):
        add(torch.ones(10, device="cuda:1"), torch.ones(10, device="cuda:0"), torch.ones(10, device="cuda:1"))


# --- faults of asynchronous kernels


def test_a_fault_is_reported_by_the_next_call_that_waits_or_launches(torch):
    done = run_script("""
        import torch, phobos
        from phobos.errors import LaunchError

        class Bogus:  # device memory that is not there
            __cuda_array_interface__ = {"shape": (1 << 20,), "typestr": "<f4", "data": (0x10, False), "version": 3}

        add = phobos.load("examples/add.phobos", mode="gpu").add.configure(BLOCK=1024)  # nothing to tune
        a = torch.ones(1 << 20, device="cuda")
        add(a, Bogus(), a)
        print("queued")
        try:
            torch.cuda.synchronize()
        except RuntimeError as error:
            print("synchronize:", error)
        try:
            add(a, a, a)
            torch.cuda.synchronize()
        except (LaunchError, RuntimeError) as error:
            print("next call:", type(error).__name__, error)
    """)
    print(done.stdout + done.stderr)
    assert "queued" in done.stdout and "synchronize:" in done.stdout and "illegal" in done.stdout.lower()
    assert "next call:" in done.stdout


# --- the cubin ptxas made is what runs after tuning


def test_after_tuning_the_kernel_runs_from_ptxass_cubin(torch):
    from phobos.run import runtime
    from phobos.toolchain import find_ptxas
    try:
        find_ptxas()
    except phobos.PhobosError as error:
        pytest.skip(error.message)
    sgemm = phobos.load(EXAMPLES / "sgemm.phobos", mode="gpu").sgemm
    A, B, C = (torch.randn(256, 256, device="cuda") for _ in range(3))
    sgemm(A, B, C, alpha=1.0, beta=0.0)
    torch.cuda.synchronize()
    assert torch.allclose(C, A @ B, rtol=1e-3, atol=1e-3)
    (module,) = [m for (ptx, _), m in runtime._modules.items() if ptx == sgemm.ptx]
    assert module.from_cubin


# --- in-place calls


def test_in_place_calls_read_without_the_read_only_cache(add, torch):
    x, y = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
    for _ in range(3):  # the first call, then the prepared one
        before = x.clone()
        add(x, y, x)
        assert torch.equal(x, before + y)
        assert add.compiled.read_only_cache is False and ".nc" not in add.ptx
    c = torch.empty_like(x)
    add(x, y, c)
    assert torch.equal(c, x + y) and "ld.global.nc" in add.ptx
    add(x, y, x)  # back to the in-place launch, prepared already
    assert add.compiled.read_only_cache is False
