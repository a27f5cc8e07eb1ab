"""The CPU-side parts of benchmarks/bench_gemm_tc.py's FP8 cases: the cases `--only gemm_fp8` names, the
quantisation (per tensor, per block) and dequantisation the errors are measured against, a whole case run
on the CPU (the kernels in the interpreter, torch._scaled_mm on the CPU, a stand-in timer), and the row's
ratio, target and peers."""
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
import bench_gemm_tc as bench  # noqa: E402


def test_only_gemm_fp8_names_both_kernels_at_the_three_shapes():
    assert bench.cases(["gemm_fp8"], [1024]) == [
        "gemm_fp8:4096x4096x4096", "gemm_fp8_blockwise:4096x4096x4096", "gemm_fp8:8192x8192x8192",
        "gemm_fp8_blockwise:8192x8192x8192", "gemm_fp8:8192x8192x4096", "gemm_fp8_blockwise:8192x8192x4096"]
    assert bench.cases(["gemm_fp8_blockwise"], [1024])[0] == "gemm_fp8_blockwise:4096x4096x4096"
    assert bench.cases(["attention_fp8"], [1024]) == [f"attention_fp8:{d}:{c}" for d in (64, 128) for c in (0, 1)]


def test_per_tensor_quantisation_maps_the_largest_magnitude_to_448():
    """Each value comes back within half a step of e4m3: 2^-4 of it, or half the subnormals' step (2^-10 of
    the scale)."""
    torch.manual_seed(35)
    x = torch.randn(50, 70) * 3
    codes, scale = bench.per_tensor_quantised(x)
    assert codes.dtype == torch.float8_e4m3fn and codes.float().abs().max().item() == 448.0
    assert scale.item() == pytest.approx(x.abs().max().item() / 448, rel=1e-6)
    back = bench.dequantised(codes, scale)
    tolerance = 2 ** -4 * x.double().abs() + 2 ** -10 * scale.item()
    assert back.dtype == torch.float64 and ((back - x.double()).abs() <= tolerance).all()


@pytest.mark.parametrize("rows", [1, 128])
def test_block_scales_of_ragged_shapes(rows):
    torch.manual_seed(rows)
    x = torch.randn(130, 300) * torch.logspace(-3, 3, 300)
    codes, scales = bench.block_quantised(x, rows)
    assert scales.shape == (-(-130 // rows), 3)
    for i in range(scales.shape[0]):
        for j in range(3):
            block = x[i * rows:(i + 1) * rows, j * 128:(j + 1) * 128]
            assert scales[i, j].item() == pytest.approx(block.abs().max().item() / 448, rel=1e-6)
            assert codes[i * rows:(i + 1) * rows, j * 128:(j + 1) * 128].float().abs().max().item() == 448.0
    back = bench.dequantised(codes, scales, rows)
    tolerance = 2 ** -4 * x.double().abs() + 2 ** -10 * bench.expanded(scales.double(), rows, x.shape)
    assert ((back - x.double()).abs() <= tolerance).all()


@pytest.mark.parametrize("group", ["gemm_fp8", "gemm_fp8_blockwise"])
def test_a_case_runs_on_the_cpu(group):
    """The kernels in the interpreter, torch._scaled_mm on the CPU; the errors are C's rounding to bf16 (at most
    2^-8 of C's largest magnitude, `c_max`), and f32 sums'."""
    torch.manual_seed(7)
    row = bench.run_fp8(group, 70, 90, 260, device="cpu", timer=lambda *fns: [2.0] * len(fns))
    assert row["shape"] == "70x90x260" and row["flops"] == 2 * 70 * 90 * 260
    assert ("scaled_mm_ms" in row) == (group == "gemm_fp8_blockwise")
    bound = 2 ** -8 * row["c_max"] * 1.01
    assert 0 < row["phobos_error"] <= bound and 0 < row["reference_error"] <= bound, row
    done = bench.finish(dict(row, case=f"{group}:70x90x260", group=group, status="ok"))
    assert done["ratio"] == 1.0 and done["target"] == bench.TARGETS[group] and done["meets_target"] is (1.0 >= done["target"])
    assert ("scaled_mm_tflops" in done) == (group == "gemm_fp8_blockwise")
    assert group in bench.summary(done)
