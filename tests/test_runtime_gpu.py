# Launching PTX on a real GPU (skipped with the reason where there is none).
from __future__ import annotations

import numpy as np
import pytest

from phobos.run import runtime
from phobos.errors import LaunchError, PtxasError

pytestmark = pytest.mark.gpu

BLOCK = 256

# out[i] = i read back through dynamic shared memory; the block size must not
# exceed the number of u32 slots in the shared buffer.
SHARED_ROUND_TRIP_PTX = """\
.version 7.8
.target sm_75
.address_size 64
.extern .shared .align 16 .b8 dynamic_shared[];
.visible .entry shared_round_trip(.param .u64 out, .param .u32 stride)
{
    .reg .b32 %r<5>;
    .reg .b64 %rd<5>;
    mov.u32 %r0, %tid.x;
    ld.param.u32 %r1, [stride];
    mul.lo.u32 %r2, %r0, %r1;               // slot = tid * stride: spread over the buffer
    mul.wide.u32 %rd0, %r2, 4;
    mov.u64 %rd1, dynamic_shared;
    add.s64 %rd2, %rd1, %rd0;
    st.shared.u32 [%rd2], %r0;
    bar.sync 0;
    ld.shared.u32 %r3, [%rd2];
    ld.param.u64 %rd3, [out];
    cvta.to.global.u64 %rd3, %rd3;
    mul.wide.u32 %rd4, %r0, 4;
    add.s64 %rd3, %rd3, %rd4;
    st.global.u32 [%rd3], %r3;
    ret;
}
"""


def grid_for(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def random_inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    return rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)


@pytest.mark.parametrize("n", [1, 1000, 2**20 + 3])
def test_add_matches_numpy(add_ptx_path, n):
    a, b = random_inputs(n)
    c = np.full(n, np.nan, dtype=np.float32)
    runtime.launch(add_ptx_path.read_text(), "add", grid_for(n), BLOCK, [a, b, c, n])
    np.testing.assert_array_equal(c, a + b)


def test_add_writes_nothing_past_n(add_ptx_path):
    a, b = random_inputs(1000)
    c = np.zeros(1000, dtype=np.float32)
    runtime.launch(add_ptx_path.read_text(), "add", grid_for(1000), BLOCK, [a, b, c, 999])
    np.testing.assert_array_equal(c[:999], (a + b)[:999])
    assert c[999] == 0


def test_strided_output_is_copied_back_in_place(add_ptx_path):
    a, b = random_inputs(1000)
    storage = np.zeros(2000, dtype=np.float32)
    c = storage[::2]
    runtime.launch(add_ptx_path.read_text(), "add", grid_for(1000), BLOCK, [a, b, c, 1000])
    np.testing.assert_array_equal(storage[::2], a + b)
    assert not storage[1::2].any()


def test_copy_back_can_be_limited(add_ptx_path):
    a, b = random_inputs(100)
    c = np.zeros(100, dtype=np.float32)
    module = runtime.load_module(add_ptx_path.read_text())
    runtime.launch(module, "add", 1, BLOCK, [a, b, c, 100], copy_back=[])
    assert not c.any()
    runtime.launch(module, "add", 1, BLOCK, [a, b, c, 100], copy_back=[2])
    np.testing.assert_array_equal(c, a + b)


def test_modules_are_loaded_once_per_text(add_ptx_path):
    text = add_ptx_path.read_text()
    assert runtime.load_module(text) is runtime.load_module(text)


def test_pycuda_device_memory_is_passed_without_copies(add_ptx_path):
    import pycuda.driver as driver
    import pycuda.gpuarray as gpuarray

    a, b = random_inputs(5000)
    a_gpu = gpuarray.to_gpu(a)
    b_allocation = driver.mem_alloc(b.nbytes)
    driver.memcpy_htod(b_allocation, b)
    c_gpu = gpuarray.zeros(5000, np.float32)
    runtime.launch(add_ptx_path.read_text(), "add", grid_for(5000), BLOCK, [a_gpu, b_allocation, c_gpu, 5000])
    np.testing.assert_array_equal(c_gpu.get(), a + b)


def test_torch_tensors_are_passed_as_device_memory(add_ptx_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch was built without CUDA or sees no GPU")
    a, b = (torch.from_numpy(x).cuda() for x in random_inputs(3000))
    c = torch.zeros(3000, dtype=torch.float32, device="cuda")
    runtime.launch(add_ptx_path.read_text(), "add", grid_for(3000), BLOCK, [a, b, c, 3000])
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)


def test_dynamic_shared_memory_above_48_kib():
    shared_bytes = 160 * 1024
    stride = shared_bytes // 4 // 1024  # 1024 threads spread over the whole buffer
    out = np.zeros(1024, dtype=np.uint32)
    runtime.launch(SHARED_ROUND_TRIP_PTX, "shared_round_trip", 1, 1024, [out, stride], shared_bytes=shared_bytes)
    np.testing.assert_array_equal(out, np.arange(1024, dtype=np.uint32))


def test_driver_errors_name_the_kernel_and_the_launch_shape(add_ptx_path):
    a, b = random_inputs(10)
    with pytest.raises(LaunchError, match=r"kernel 'add' failed \(grid \(1, 1, 1\), block \(2048, 1, 1\), 0 B"):
        runtime.launch(add_ptx_path.read_text(), "add", 1, 2048, [a, b, a.copy(), 10])


def test_ptx_the_driver_rejects_is_a_ptxas_error():
    with pytest.raises(PtxasError, match="the CUDA driver rejected the PTX"):
        runtime.load_module(".version 7.8\n.target sm_75\n.address_size 64\n.visible .entry k() { bogus; }\n")


def test_time_launch_returns_milliseconds(add_ptx_path):
    n = 2**20
    a, b = random_inputs(n)
    c = np.zeros(n, dtype=np.float32)
    milliseconds = runtime.time_launch(add_ptx_path.read_text(), "add", grid_for(n), BLOCK, [a, b, c, n], repeat=5)
    assert 0 < milliseconds < 1000
    assert not c.any()  # timing does not copy back


def test_gpu_available_names_the_device():
    available, device_name = runtime.gpu_available()
    assert available and device_name


def test_over_aligned_parameters_reach_the_kernel_intact():
    """Tensor-map-like parameters (.align 64) sit where the driver puts them (on sm_90 not where a C
    struct would): the probe kernel writes back the bytes it reads."""
    from .tensor_core_support import gemm_generator

    if runtime.device_properties().compute_capability < (9, 0):
        pytest.skip("the probe is built for sm_90")
    maps = [bytes(range(128)), bytes(range(255, 127, -1))]
    out = np.zeros(67, np.uint32)
    runtime.launch(gemm_generator().parameter_probe(), "parameter_probe", 1, 32, [out] + maps + [5, 6, 7], timeout_s=30)
    assert out.tobytes() == maps[0] + maps[1] + np.array([5, 6, 7], np.uint32).tobytes()
