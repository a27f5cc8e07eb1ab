# Strided tensors: views that are not C-contiguous - transposed, sliced,
# channels-last, broadcast - are taken as they lie.  Their strides reach the
# kernel as launch values (`stride` parameters), the code specialised on a
# last stride of 1 (vector accesses) as Triton specialises on contiguity, and
# the choice is part of the compiled kernel's cache key; tensor maps for TMA
# are built from the strides where the driver allows them.  A contiguous call
# compiles and launches as before.  Refused, naming the argument: negative
# strides, strides that are not whole elements, and overlapping elements in a
# tensor the kernel writes.  Before, every non-contiguous view was refused.
from __future__ import annotations

import struct
import types

import numpy as np
import pytest

import phobos
from phobos.compiler import CodeOptions
from phobos.errors import LaunchError
from phobos.launch import binding, launcher
from phobos.run import backends
from phobos.run.tensor_map import describable, kernel_map

from .language_support import MODES as PLAIN_MODES
from .test_dtype_coverage import MODES
from .test_launcher_stand_in_gpu import gpu  # noqa: F401 (a fixture)
from .test_runtime_stand_in_driver import driver as stand_in_driver  # noqa: F401 (a fixture)

EW = """
kernel k(a: tensor<f32>[M, N], b: tensor<f32>[M, N], c: tensor<f32>[M, N], v: tensor<f32>[M]) {
    let r = program_id(0) * 4
    c[r :+ 4, 0 :+ 32] = a[r :+ 4, 0 :+ 32] * 2.0 + b[r :+ 4, 0 :+ 32]
    v[r :+ 4] = reshape(sum(a[r :+ 4, 0 :+ 32], axis=1), [4])
}
"""


def views(rng):
    """A transposed view, a row-sliced one (last stride 1), and strided outputs inside larger arrays."""
    a = rng.standard_normal((40, 50)).astype(np.float32).T[:10, :30]         # strides (1, 50)
    b = rng.standard_normal((10, 64)).astype(np.float32)[:, 3:33]            # strides (64, 1)
    c_memory, v_memory = np.zeros((10, 70), np.float32), np.zeros((10, 3), np.float32)
    return a, b, c_memory, v_memory


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_transposed_sliced_and_strided_views_are_read_and_written_as_they_lie(mode):
    a, b, c_memory, v_memory = views(np.random.default_rng(0))
    c, v = c_memory[:, ::2][:, :30], v_memory[:, 1]                           # strides (70, 2) and (3,)
    mod = phobos.jit(EW, mode=mode)
    mod.k[(3,)](a, b, c, v)                                                   # 3 x 4 rows: an edge at 10
    np.testing.assert_allclose(c, a * 2 + b, rtol=1e-6)
    np.testing.assert_allclose(v, a.sum(axis=1), rtol=1e-5, atol=1e-5)
    assert not c_memory[:, 1::2].any() and not c_memory[:, 61:].any() and not v_memory[:, [0, 2]].any()


NHWC = """
kernel k(x: tensor<f32>[N, H, W, C], y: tensor<f32>[N, H, W, C]) {
    let n = program_id(0)
    let h = program_id(1)
    y[n, h, 0 :+ 8, 0 :+ 4] = x[n, h, 0 :+ 8, 0 :+ 4] + f32(reshape(arange(0, 4), [1, 4]))
}
"""


@pytest.mark.parametrize("mode", PLAIN_MODES)
def test_channels_last_views(mode):
    """A channels-last tensor (NHWC view of NCHW memory, torch's channels_last) read and written in place."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 5, 8)).astype(np.float32).transpose(0, 2, 3, 1)   # [N, H, W, C] view
    y = np.zeros((2, 4, 5, 8), np.float32).transpose(0, 2, 3, 1)
    phobos.kernel(NHWC, mode=mode)[(2, 5)](x, y)
    np.testing.assert_array_equal(y, x + np.arange(4, dtype=np.float32))


BROADCAST = """
kernel k(x: tensor<f32>[M, N], bias: tensor<f32>[M, N], y: tensor<f32>[M, N]) {
    y[0 :+ 8, 0 :+ 16] = x[0 :+ 8, 0 :+ 16] + bias[0 :+ 8, 0 :+ 16]
}
"""


@pytest.mark.parametrize("mode", PLAIN_MODES)
def test_a_broadcast_view_may_be_read(mode):
    """A zero stride (np.broadcast_to, torch's expand) reads one row for all: allowed in a tensor only read."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    bias = np.broadcast_to(rng.standard_normal(16).astype(np.float32), (8, 16))
    y = np.zeros((8, 16), np.float32)
    phobos.kernel(BROADCAST, mode=mode)(x, bias, y)
    np.testing.assert_array_equal(y, x + bias)


def test_torch_views_in_the_cpu_modes():
    torch = pytest.importorskip("torch")
    base = torch.randn(40, 50)
    a, b = base.T[:10, :30], torch.randn(10, 64)[:, 3:33]
    c = torch.zeros(10, 70)[:, ::2][:, :30]
    v = torch.zeros(10, 3)[:, 1]
    for mode in ("interpret", "emulate"):
        phobos.jit(EW, mode=mode).k[(3,)](a, b, c, v)
        torch.testing.assert_close(c, a * 2 + b)
        torch.testing.assert_close(v, a.sum(dim=1), rtol=1e-5, atol=1e-5)
        c.zero_()


# ------------------------------------------------------------ the code a strided call gets
def test_strides_are_launch_values_specialised_on_a_last_stride_of_one():
    a, b, c_memory, v_memory = views(np.random.default_rng(0))
    call = binding.bind("k", phobos.jit(EW).k._kernel.info.params, ["M", "N"], (a, b, c_memory[:, :30],
                        v_memory[:, 1]), {})
    options = launcher.code_options(call, backends.EmulateBackend(), "sm_80")
    assert options.strided == (("a", False), ("b", True), ("c", True), ("v", False))
    compiled = phobos.compile(EW, arch="sm_80", strided=options.strided)
    strides = [(p.name, p.dims[0]) for p in compiled.params if p.kind == "stride"]
    assert strides == [("a", 0), ("a", 1), ("b", 0), ("c", 0), ("v", 0)]  # b's and c's last stride: the constant 1
    rows = "kernel k(b: tensor<f32>[M, N], c: tensor<f32>[M, N]) {\n    c[0 :+ 4, 0 :+ 32] = b[0 :+ 4, 0 :+ 32]\n}\n"
    ptx = phobos.compile(rows, arch="sm_80", strided=(("b", True), ("c", True))).ptx
    assert "ld.global.nc.v4.f32" in ptx and "st.global.v4.f32" in ptx  # a last stride of 1 keeps vectors
    ptx = phobos.compile(rows, arch="sm_80", strided=(("b", False), ("c", True))).ptx
    assert ".v4" not in ptx  # another: an element at a time
    plain = launcher.code_options(binding.bind("k", phobos.jit(EW).k._kernel.info.params, ["M", "N"],
                                               [np.zeros((10, 30), np.float32) for _ in range(3)] + [np.zeros(10, np.float32)],
                                               {}), backends.EmulateBackend(), "sm_80")
    assert plain == CodeOptions() and plain.keywords() == {}  # a contiguous call: code and cache keys as before
    assert "strided" in options.keywords()


def test_each_specialisation_is_compiled_and_kept_apart():
    mod = phobos.jit(EW, mode="emulate")
    rng = np.random.default_rng(3)
    a, b, c_memory, v_memory = views(rng)
    contiguous = [np.ascontiguousarray(a), np.ascontiguousarray(b), np.zeros((10, 30), np.float32),
                  np.zeros(10, np.float32)]
    mod.k[(3,)](*contiguous)
    plain = mod.k.compiled
    mod.k[(3,)](a, b, c_memory[:, :30], v_memory[:, 1])
    strided = mod.k.compiled
    assert strided is not plain and strided.strided and not plain.strided
    assert not any(p.kind == "stride" for p in plain.params)
    mod.k[(3,)](*contiguous)
    assert mod.k.compiled is plain


@pytest.mark.parametrize("value, words", [
    (np.zeros((10, 30), np.float32)[:, ::-1], "with strides (30, -1); kernels take strides of 0 or more"),
    (np.zeros((10, 121), np.uint8)[:, 1:].view(np.float32), "its strides are not whole elements"),
], ids=["negative", "not-whole-elements"])
def test_views_that_cannot_be_taken_are_refused_naming_the_argument(value, words):
    a, b, _, v_memory = views(np.random.default_rng(0))
    with pytest.raises(LaunchError) as error:
        phobos.jit(EW, mode="interpret").k[(3,)](value, b, np.zeros((10, 30), np.float32), v_memory[:, 1])
    assert "argument 'a'" in error.value.message and words in error.value.message
    assert "pass a copy, e.g. np.ascontiguousarray(x) or x.contiguous()" in error.value.message


def test_a_written_view_whose_elements_overlap_is_refused():
    a, b, _, v_memory = views(np.random.default_rng(0))
    c = np.lib.stride_tricks.as_strided(np.zeros(40, np.float32), (10, 30), (4, 4))  # rows overlap
    with pytest.raises(LaunchError, match="argument 'c'.*the kernel writes it, and its elements overlap"):
        phobos.jit(EW, mode="interpret").k[(3,)](a, b, c, v_memory[:, 1])
    assert binding._apart((10, 30), (30, 1)) and binding._apart((10, 30), (1, 10)) and binding._apart((1, 5), (0, 1))
    assert not binding._apart((10, 30), (1, 1)) and not binding._apart((3, 4), (2, 1))


# ------------------------------------------------------------ TMA
def test_tensor_maps_are_built_from_the_strides_where_the_driver_allows():
    assert describable((130, 264), 2, 0x1000, (1000, 1))  # rows 2000 bytes apart: a multiple of 16
    assert not describable((130, 264), 2, 0x1000, (1001, 1))  # 2002 bytes apart
    assert not describable((264, 130), 2, 0x1000, (1, 264))  # the last dim is not dense
    a = np.zeros((130, 1000), np.uint16)
    tmap = kernel_map(a, (130, 264), "bf16", (128, 64), (1000, 1))
    assert (tmap.shape, tmap.strides, tmap.box) == ((264, 130), (2000,), (64, 128))


@pytest.fixture
def emulate_sm_90a(monkeypatch):
    monkeypatch.setattr(backends.EmulateBackend, "arch", lambda self, index=0: "sm_90a")


def test_a_gemm_of_row_sliced_views_copies_by_tma_and_of_a_transposed_one_by_cp_async(emulate_sm_90a):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from .test_tma import GEMM_BF16
    fn = phobos.load(GEMM_BF16, mode="emulate").gemm_bf16.configure(TILE_M=128, TILE_N=128, TILE_K=64, WARPS=8,
                                                                     STAGES=3)
    rng = np.random.default_rng(1)
    m, n, kk = 130, 136, 128
    a = rng.standard_normal((m, kk + 40), dtype=np.float32).astype(ml_dtypes.bfloat16)[:, 8:8 + kk]
    b = rng.standard_normal((kk, n + 24), dtype=np.float32).astype(ml_dtypes.bfloat16)[:, :n]
    c_memory = np.full((m, n + 8), np.nan, ml_dtypes.bfloat16)
    c = c_memory[:, :n]
    exact = a.astype(np.float64) @ b.astype(np.float64)
    fn(a, b, c)  # rows 336, 320 and 288 bytes apart; A starts 16 bytes into its rows
    assert any("copied by TMA" in note for note in fn.compiled.notes), fn.compiled.notes
    assert {p.name for p in fn.compiled.params if p.kind == "tensor_map"} == {"A", "B", "C"}
    np.testing.assert_allclose(c.astype(np.float64), exact, rtol=2 ** -7, atol=1e-3)
    assert np.isnan(c_memory[:, n:].astype(np.float32)).all()
    bt = np.ascontiguousarray(b.T).T  # B column-major: its last stride is K, so no map and no vectors
    c[...] = np.nan
    fn(a, bt, c)
    assert not any("copied by TMA" in note for note in fn.compiled.notes)
    np.testing.assert_allclose(c.astype(np.float64), exact, rtol=2 ** -7, atol=1e-3)


# ------------------------------------------------------------ the GPU
@pytest.mark.gpu
def test_torch_views_on_the_gpu():
    torch = pytest.importorskip("torch")
    base = torch.randn(40, 50, device="cuda")
    a, b = base.T[:10, :30], torch.randn(10, 64, device="cuda")[:, 3:33]
    c = torch.zeros(10, 70, device="cuda")[:, ::2][:, :30]
    v = torch.zeros(10, 3, device="cuda")[:, 1]
    k = phobos.jit(EW, mode="gpu").k[(3,)]
    for _ in range(3):  # the second and third calls take the prepared launch of the strided signature
        k(a, b, c, v)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, a * 2 + b)
    torch.testing.assert_close(v, a.sum(dim=1), rtol=1e-5, atol=1e-5)
    x = torch.randn(2, 4, 5, 8, device="cuda").permute(0, 2, 3, 1)  # [N, H, W, C] over NCHW memory
    y = torch.zeros(2, 4, 5, 8, device="cuda").permute(0, 2, 3, 1)
    phobos.kernel(NHWC, mode="gpu")[(2, 5)](x, y)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x + torch.arange(4, device="cuda", dtype=torch.float32))


# ------------------------------------------------------------ the prepared call of a strided signature
@pytest.fixture
def strided_add_gpu(gpu, monkeypatch):
    """The stand-in GPU of test_launcher_stand_in_gpu, its add kernel taking c's stride (a parameter after N)."""
    from .test_launcher_stand_in_gpu import PhobosAdd

    def launch(self, grid, block, parameters: bytes, shared_size: int, stream: int) -> int:
        a, b, c, n = struct.unpack_from("<QQQi", parameters)
        (stride,) = struct.unpack_from("<q", parameters, 32) if len(parameters) > 28 else (1,)
        self.driver.launches.append(dict(c=c, stride=stride))
        count = min(n, grid[0] * (self.block or 4 * block[0]))
        out = np.frombuffer(self.driver.memory[c], np.float32)
        out[: stride * count: stride] = self.driver.floats_at(a, count) + self.driver.floats_at(b, count)
        return 0

    monkeypatch.setattr(PhobosAdd, "launch", launch)
    return gpu


def strided_on_device(driver, n: int, stride: int):
    from .test_call_path import OnDevice
    memory = OnDevice(driver, np.zeros(n * stride, np.float32))
    memory.__cuda_array_interface__ = {**memory.__cuda_array_interface__, "shape": (n,), "strides": (4 * stride,)}
    return memory


def test_a_strided_signature_is_prepared_with_its_strides_and_new_strides_are_a_new_signature(strided_add_gpu,
                                                                                              monkeypatch):
    from .launcher_fakes import ADD4
    from .test_call_path import on_device
    gpu = strided_add_gpu
    add = phobos.kernel(ADD4, mode="gpu").configure(BLOCK=256)
    a, b = (np.arange(1000, dtype=np.float32) * k for k in (1, 3))
    da, db = on_device(gpu, a, b)
    dc = strided_on_device(gpu, 1000, 2)
    bound, real_bind = [], launcher.bind
    monkeypatch.setattr(launcher, "bind", lambda *args, **kwargs: bound.append(1) or real_bind(*args, **kwargs))
    add(da, db, dc)
    add(da, db, dc)  # the prepared launch: not bound again, the stride a constant of the signature
    assert len(bound) == 1 and [launch["stride"] for launch in gpu.launches] == [2, 2]
    np.testing.assert_array_equal(np.frombuffer(gpu.memory[int(dc.allocation)], np.float32)[::2], a + b)
    add(da, db, strided_on_device(gpu, 1000, 3))  # other strides: the full path, the new stride
    assert len(bound) == 2 and gpu.launches[-1]["stride"] == 3
    add(*on_device(gpu, a, b, np.zeros(1000, np.float32)))  # contiguous: compiled without stride parameters
    assert gpu.launches[-1]["stride"] == 1 and add.compiled.strided == ()


class StridedTorchTensor:
    """A CUDA tensor as torch has it (in a class whose module is `torch`), of given strides."""

    def __init__(self, shape, strides, contiguous: bool):
        self.shape, self._strides, self._contiguous = shape, strides, contiguous
        self.dtype, self.is_cuda = "torch.float32", True

    def data_ptr(self) -> int:
        return 0x7000_0000

    def get_device(self) -> int:
        return 0

    def is_contiguous(self) -> bool:
        return self._contiguous

    def stride(self):
        return self._strides


StridedTorchTensor.__module__ = "torch"


def test_a_torch_views_strides_are_part_of_its_signature_and_of_the_direct_calls_guard():
    from phobos.launch import fastpath
    contiguous = StridedTorchTensor((4, 6), (6, 1), True)
    view = StridedTorchTensor((4, 6), (1, 4), False)
    (plain,), _, _ = fastpath.probe([contiguous], lambda address: 0)
    (strided,), _, _ = fastpath.probe([view], lambda address: 0)
    assert plain[3] is True and strided[3] == (1, 4)  # a contiguous tensor's key part is what it was
    fast = fastpath.FastCall(None, [("pointer", 0), ("const", 4)], fastpath.StreamSource("null"), None,
                             lambda handle: None, parts=(strided,), locate=lambda address: 0,
                             owner=types.SimpleNamespace(last=None))
    assert fast.direct((view,)) is fast
    assert fast.direct((StridedTorchTensor((4, 6), (1, 5), False),)) is None  # other strides: not this signature
    assert fast.direct((contiguous,)) is None
