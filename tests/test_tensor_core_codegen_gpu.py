# The tensor-core examples on the GPU, through the documented call on torch tensors, against
# torch at sizes that are not multiples of any tile: bf16 and f16 GEMMs against torch.mm, TF32
# against cuBLAS's TF32, 3xTF32 no less accurate than cuBLAS's SGEMM, attention against torch's
# scaled_dot_product_attention.  Every kernel runs the configuration the autotuner chose, and its
# report must say the products ran on the tensor cores.
from __future__ import annotations

import math
from pathlib import Path

import pytest

import phobos

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return torch


def on_tensor_cores(fn) -> None:
    products = [note for note in fn.compiled.notes if ": dot runs on " in note]
    assert products and all("runs on the tensor cores" in note for note in products), fn.compiled.notes


@pytest.mark.parametrize("name,dtype", [("gemm_bf16", "bfloat16"), ("gemm_f16", "float16")])
def test_16_bit_gemm_matches_torch(torch, name, dtype):
    dt = getattr(torch, dtype)
    m, k, n = 1000 + 3, 700 + 5, 900 + 1
    a, b = torch.randn(m, k, device="cuda").to(dt), torch.randn(k, n, device="cuda").to(dt)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
    gemm = getattr(phobos.load(EXAMPLES / "gemm_bf16.phobos", mode="gpu"), name)
    gemm(a, b, c)
    on_tensor_cores(gemm)
    exact = a.double() @ b.double()
    ours, theirs = (c.double() - exact).abs().max().item(), (torch.mm(a, b).double() - exact).abs().max().item()
    assert ours <= 2 * theirs + 1e-3, (ours, theirs)


@pytest.mark.parametrize("n,tma", [(904, True), (901, False)], ids=["maps", "rows-1802-bytes"])
def test_16_bit_gemm_copies_by_tma_where_every_tensor_can_have_a_map(torch, n, tma):
    m, k = 1003, 712
    a, b = torch.randn(m, k, device="cuda").to(torch.bfloat16), torch.randn(k, n, device="cuda").to(torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemm = phobos.load(EXAMPLES / "gemm_bf16.phobos", mode="gpu").gemm_bf16.configure(
        TILE_M=128, TILE_N=256, TILE_K=64, WARPS=8, STAGES=4)
    for _ in range(2):  # the first call, then the prepared launch of its signature
        c.fill_(float("nan"))
        gemm(a, b, c)
        assert any("copied by TMA" in note for note in gemm.compiled.notes) == tma, gemm.compiled.notes
        exact = a.double() @ b.double()
        ours, theirs = (c.double() - exact).abs().max().item(), (torch.mm(a, b).double() - exact).abs().max().item()
        assert ours <= 2 * theirs + 1e-3, (ours, theirs)
    other = torch.randn(k, n, device="cuda").to(torch.bfloat16)  # another address: another map
    gemm(a, other, c)
    exact = a.double() @ other.double()
    assert (c.double() - exact).abs().max().item() <= 2 * (torch.mm(a, other).double() - exact).abs().max().item() + 1e-3


@pytest.mark.parametrize("precision", ["tf32", "tf32x3"])
def test_tf32_gemms_are_as_accurate_as_cublas(torch, precision):
    m, k, n = 1000 + 3, 2048 + 5, 900 + 1
    a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
    c = torch.full((m, n), float("nan"), device="cuda")
    gemm = getattr(phobos.load(EXAMPLES / "sgemm_tf32.phobos", mode="gpu"), f"sgemm_{precision}")
    gemm(a, b, c)
    on_tensor_cores(gemm)
    exact = a.double() @ b.double()
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"  # 3xTF32 is held to SGEMM's accuracy
    try:
        theirs = (torch.mm(a, b).double() - exact).abs().max().item()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    ours = (c.double() - exact).abs().max().item()
    assert ours <= 1.5 * theirs, (ours, theirs)


TF32_WGMMA = {"tf32": [(128, 128, 8, 3), (128, 256, 8, 2), (64, 256, 8, 4)],
              "tf32x3": [(128, 128, 8, 3), (64, 128, 8, 2), (64, 64, 4, 4)]}
TF32_TMA = [(256, 128, 8, 4), (128, 256, 8, 3), (64, 128, 4, 3)]  # rows of 204 and 264 f32: tensor maps


@pytest.mark.parametrize("precision,tile,tma", [(p, t, False) for p, tiles in TF32_WGMMA.items() for t in tiles]
                         + [("tf32", t, True) for t in TF32_TMA])
def test_tf32_wgmma_gemms_give_the_tensor_core_model_bit_for_bit(torch, precision, tile, tma):
    """sm_90a: each product on wgmma, its operands rounded and staged through registers (rows of 205 and 261
    f32: no tensor maps) or copied by TMA through a tf32 map and transposed by the producer warpgroup, gives
    exactly the bits of the H200's tensor-core model (what the emulator checks on the CPU)."""
    import numpy as np

    from .tensor_core_support import tf32_gemm_reference
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs a compute capability 9.0 GPU")
    tile_m, tile_n, warps, stages = tile
    m, k, n = (300 + 3, 200 + 4, 260 + 4) if tma else (300 + 3, 200 + 5, 260 + 1)
    a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
    c = torch.full((m, n), float("nan"), device="cuda")
    gemm = getattr(phobos.load(EXAMPLES / "sgemm_tf32.phobos", mode="gpu"), f"sgemm_{precision}").configure(
        TILE_M=tile_m, TILE_N=tile_n, TILE_K=32, WARPS=warps, STAGES=stages)
    gemm(a, b, c)
    assert "wgmma" in gemm.compiled.notes[0], gemm.compiled.notes
    assert any("copied by TMA" in note for note in gemm.compiled.notes) == tma, gemm.compiled.notes
    expected = tf32_gemm_reference(a.cpu().numpy(), b.cpu().numpy(), precision, 32)
    got = c.cpu().numpy()
    differ = np.flatnonzero(got.view(np.uint32) != expected.view(np.uint32))
    if differ.size:
        first = differ[0]
        pytest.fail(f"{differ.size} of {got.size} results differ; the first at {divmod(first, n)}: "
                    f"{got.flat[first]!r}, the model {expected.flat[first]!r}")


@pytest.mark.parametrize("head", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_torch_sdpa(torch, head, causal):
    """Two batches of four query heads sharing two key/value heads (grouped-query attention), ragged."""
    import torch.nn.functional as F
    batch, heads, kv_heads, length = 2, 4, 2, 1000 + 7
    q = torch.randn(batch, heads, length, head, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(batch, kv_heads, length, head, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o = torch.full_like(q, float("nan"))
    attention = phobos.load(EXAMPLES / "attention_bf16.phobos", mode="gpu").attention
    attention(q, k, v, o, scale=1 / math.sqrt(head), causal=causal)
    on_tensor_cores(attention)
    k_rep, v_rep = (x.double().repeat_interleave(heads // kv_heads, dim=1) for x in (k, v))
    s = (q.double() @ k_rep.transpose(-1, -2)) / math.sqrt(head)
    if causal:
        s = s.masked_fill(torch.ones(length, length, dtype=torch.bool, device="cuda").triu(1), -math.inf)
    exact = torch.softmax(s, dim=-1) @ v_rep
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    theirs = (sdpa.double() - exact).abs().max().item()
    ours = (o.double() - exact).abs().max().item()
    assert ours <= 2 * theirs + 2 ** -9, (ours, theirs)


def test_an_h200_compiles_for_sm_90a(torch):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("not a compute capability 9.0 GPU")
    gemm = phobos.load(EXAMPLES / "gemm_bf16.phobos", mode="gpu").gemm_bf16
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    gemm(a, a, torch.empty_like(a))
    assert gemm.compiled.arch == "sm_90a" and ".target sm_90a" in gemm.ptx
