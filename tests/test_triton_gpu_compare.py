# tools/triton_gpu_compare.py, the Triton corpus on a GPU and in the emulator: what it can do without a
# GPU - the dry run (compile, emulate, check against the references, list the approximate
# instructions), the device copies of a call's arguments (views keep their strides, overlapping
# arguments share a buffer, the results come back into the host arrays), and the comparison of outputs.
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton", reason="the Triton corpus needs Triton (pip install 'phobos-tile[triton]')")

TOOL = Path(__file__).resolve().parent.parent / "tools" / "triton_gpu_compare.py"


def load():
    spec = importlib.util.spec_from_file_location("triton_gpu_compare", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_dry_run_emulates_checks_and_lists_the_approximate_instructions(capsys, tmp_path):
    tool = load()
    path = tmp_path / "compare.json"
    assert tool.main(["--dry-run", "--json", str(path), "t02_fused_softmax", "c_fma", "c_math_sin"]) == 0
    out = capsys.readouterr().out
    rows = {row["case"]: row for row in json.loads(path.read_text())["rows"]}
    assert rows["t02_fused_softmax"]["emulator_vs_reference"] == "ok"
    assert rows["t02_fused_softmax"]["approximate"] == ["div.full.f32", "ex2.approx.f32"]
    assert rows["c_fma"]["approximate"] == []
    assert rows["c_math_sin"]["emulator_vs_reference"] == "ok"  # libdevice's carry chains run
    assert "3 cases on sm_90a: emulated only, 0 not run by the emulator" in out


def test_device_copies_keep_views_and_overlaps_and_come_back():
    """On the CPU as the device: each argument's copy holds its values, through the strides of its view;
    writes into the copies land in the host arrays, one buffer for arguments that overlap."""
    torch = pytest.importorskip("torch")

    import phobos.triton
    tool = load()
    from tests.test_triton import swap_kernel
    buffer = np.arange(8 * 64, dtype=np.float32).reshape(8, 64)
    left, right = buffer[:, :32], buffer[:, 32:]
    weights = torch.arange(10, dtype=torch.float16)
    call = phobos.triton.emulate(swap_kernel).bind(left, right, 64, N=32)
    mirror = tool.DeviceMirror(call.memory, device="cpu")
    device_left, device_right = mirror.value(left), mirror.value(right)
    assert device_left.stride() == (64, 1) and torch.equal(device_left, torch.from_numpy(left.copy()))
    assert torch.equal(device_right, torch.from_numpy(right.copy()))
    assert len(mirror.buffers) == 1  # the two views of one buffer
    device_right[:, :] = device_left * 10
    mirror.copy_back()
    np.testing.assert_array_equal(buffer[:, 32:], buffer[:, :32] * 10)
    assert mirror.value(7) == 7  # what is not an array passes as it is
    call = phobos.triton.emulate(swap_kernel).bind(weights, weights, 1, N=1)
    assert torch.equal(tool.DeviceMirror(call.memory, device="cpu").value(weights), weights)


def test_outputs_compare_bit_for_bit_with_ulps():
    tool = load()
    from tests.triton_corpus import CASES
    first, second = CASES["c_fma"].make("sm_90a"), CASES["c_fma"].make("sm_90a")
    for run in (first, second):
        run.outputs[0].array[:] = run.outputs[0].want
    assert tool.compare_outputs(first, second) == {"elements": 256, "differing": 0, "max_ulps": 0}
    out = second.outputs[0].array
    out[3] = np.nextafter(out[3], np.float32(np.inf))
    out[5] = np.nextafter(np.nextafter(out[5], np.float32(-np.inf)), np.float32(-np.inf))
    assert tool.compare_outputs(first, second) == {"elements": 256, "differing": 2, "max_ulps": 2}
