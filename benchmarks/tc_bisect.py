"""Which feature of the hand-written wgmma GEMM breaks on this GPU: its ladder of kernels, one step at a time.

    python benchmarks/tc_bisect.py [--out bench_results] [--budget 170]

Each step runs in its own process with a time limit (a fault such as "illegal
instruction" kills the CUDA context; a kernel that never ends cannot be
stopped), from the simplest kernel up:

  params  the parameter buffer: a kernel with the wgmma GEMM's parameters
          (an output pointer, two 128-byte tensor maps aligned to 64, three
          sizes) writes back what it reads, packed by phobos.run.runtime at
          the offsets the driver reports (must come back whole), and packed
          like a C struct, as the runtime once did (on sm_90 the maps then
          sit away from where the kernel reads them: the wgmma GEMM got
          broken tensor maps and stopped with "illegal instruction")
  a .. h  handwritten_ptx/gemm_ptx.py's WGMMA_LADDER at 512^3: one warpgroup
          with plain loads and no swizzle, + 128-byte swizzle, + TMA and an
          mbarrier, + 4 stages, + a 64x256 tile, + a producer warpgroup, + a
          second consumer, + setmaxnreg (the prototype); each result against
          float64 numpy (bf16 output: at most 1% of max |C| off, no NaN)
  mma     handwritten_ptx/gemm_bf16_mma.ptx at 4096^3, checked against
          torch.mm of the float64 inputs and timed beside torch.mm (bf16)
  wgmma   handwritten_ptx/gemm_bf16_wgmma.ptx at 4096^3 (what failed), likewise

and prints one line per step (PASS, WRONG, FAULT, HANG, REJECTED by the
driver's JIT, ERROR, SKIP, with the error,
time and TFLOP/s), then the first step that fails and the feature it adds.
Writes bench_results/tc_bisect_<date>.json.  Steps that would start after
--budget seconds are skipped, so the whole run stays within about 3 minutes.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "handwritten_ptx"))
import gemm_ptx  # noqa: E402  (the generator of the kernels)

from phobos.errors import LaunchError, PhobosError, PtxasError  # noqa: E402
from phobos.run import cuda, runtime  # noqa: E402
from phobos.run.tensor_map import TensorMap  # noqa: E402

LADDER = {key: (what, cfg) for key, what, cfg in gemm_ptx.WGMMA_LADDER}
SMALL = 512                      # M = N = K of the ladder steps
LARGE = 4096                     # of the checked-in kernels beside torch.mm
RELATIVE_BOUND = 1e-2            # ladder steps: largest |C - C64| / max |C64| (bf16 C rounds at ~4e-3)
ERROR_FACTOR = 4                 # large steps: allowed error, in units of torch.mm's own
KERNEL_TIMEOUT_S = 20            # a launch still running after this is a hang
STEP_TIMEOUT_S = {"mma": 90, "wgmma": 90}
DEFAULT_STEP_TIMEOUT_S = 45
STEPS = ["params", *LADDER, "mma", "wgmma"]
NAN = float("nan")


# ---------------------------------------------------------------------------- the steps (child processes)

def _nan_bf16(m: int, n: int) -> np.ndarray:
    return np.full((m, n), 0x7FC0, np.uint16)  # bf16 NaN: entries never written stay NaN


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _random_bf16(rng, shape) -> np.ndarray:
    bits = rng.standard_normal(shape).astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def step_params() -> dict:
    text = gemm_ptx.parameter_probe()
    params = runtime.parse_entry_params(text)["parameter_probe"]
    module = runtime.load_module(text)
    maps = [bytes(range(128)), bytes(range(128, 256))]
    sizes = [0x11111111, 0x22222222, 0x33333333]
    expected = maps[0] + maps[1] + np.array(sizes, np.uint32).tobytes()
    out = np.zeros(len(expected) // 4, np.uint32)
    runtime.launch(module, "parameter_probe", 1, 32, [out] + maps + sizes, timeout_s=KERNEL_TIMEOUT_S)
    offsets, natural = module.function("parameter_probe").offsets, runtime.natural_offsets(params)
    detail = f"driver offsets {offsets}, C struct {natural}"
    if out.tobytes() != expected:
        return {"status": "WRONG", "detail": f"{detail}; the kernel read {out.tobytes()[:16].hex()}..."}
    # the old packing: the same values at C-struct offsets (the buffer as long as the kernel's),
    # launched by hand; the output pointer comes first, where both agree
    legacy = np.zeros_like(out)
    device = runtime.device_copy(legacy)
    bound = runtime.bind_arguments("parameter_probe", params, [int(device)] + maps + sizes)
    size = offsets[-1] + params[-1].size
    buffer = runtime.pack_parameters(bound, {}, natural)[:size].ljust(size, b"\0")
    launcher = cuda.api().launcher(module.function("parameter_probe").handle, (1, 1, 1), (32, 1, 1), 0, size)
    ctypes.memmove(launcher.buffer, buffer, size)
    code = launcher.queue(0)
    if code:
        raise LaunchError(f"kernel 'parameter_probe' failed (the C-struct packing): {cuda.api().error(code)}")
    runtime.wait_for_gpu(KERNEL_TIMEOUT_S, "parameter_probe")
    runtime._driver().memcpy_dtoh(legacy, device)
    found = legacy.tobytes().find(maps[0][:32])
    if legacy.tobytes() == expected:
        old = "the C-struct packing reads the same here"
    elif found > 0:
        old = f"the C-struct packing puts a_map {found} bytes after where the kernel reads it (the old fault)"
    else:
        old = "the C-struct packing gives the kernel other bytes than its tensor maps (the old fault)"
    return {"status": "PASS", "detail": f"{detail}; {old}"}


def _device_args(cfg, a: np.ndarray, b: np.ndarray, keep: list) -> list:
    """A and B as the kernel takes them: tensor maps over device copies, or the arrays."""
    if cfg.load == "plain":
        return [a, b]
    maps = [TensorMap.tiled(a, (cfg.bm, 64), dtype="bf16", swizzle="128B"),
            TensorMap.tiled(b, (64, 64), dtype="bf16", swizzle="128B")]
    keep += [runtime.device_copy(a), runtime.device_copy(b)]
    return [maps[0].on(int(keep[-2])), maps[1].on(int(keep[-1]))]


def step_ladder(key: str) -> dict:
    _, cfg = LADDER[key]
    m = n = k = SMALL
    gemm_ptx.check_shape(m, n, k, cfg.bm, cfg.bn, cfg.bk)
    rng = np.random.default_rng(15)
    a, b = _random_bf16(rng, (m, k)), _random_bf16(rng, (k, n))
    c = _nan_bf16(m, n)
    keep: list = []
    start = time.perf_counter()
    runtime.launch(gemm_ptx.wgmma_gemm(cfg), "gemm_bf16_wgmma", (m // cfg.bm) * (n // cfg.bn), cfg.threads,
                   _device_args(cfg, a, b, keep) + [c, m, n, k], cfg.shared_bytes, timeout_s=KERNEL_TIMEOUT_S)
    seconds = time.perf_counter() - start
    want = _bf16_values(a) @ _bf16_values(b)
    got = _bf16_values(c)
    nans = int(np.isnan(got).sum())
    error = float(np.nanmax(np.abs(got - want)) / np.abs(want).max()) if nans < got.size else float("inf")
    good = nans == 0 and error <= RELATIVE_BOUND
    return {"status": "PASS" if good else "WRONG", "error": error,
            "detail": f"{nans} entries never written; " * bool(nans) + f"load + JIT + run {seconds:.2f} s"}


def step_large(key: str) -> dict:
    import torch

    from common import gpu_ms

    file, entry, cfg = {"mma": ("gemm_bf16_mma.ptx", "gemm_bf16_mma", gemm_ptx.MmaConfig()),
                        "wgmma": ("gemm_bf16_wgmma.ptx", "gemm_bf16_wgmma", gemm_ptx.WgmmaConfig())}[key]
    size = LARGE
    module = runtime.load_module((ROOT / "handwritten_ptx" / file).read_text())
    torch.manual_seed(0)
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    reference = torch.mm(a.double(), b.double())
    scale = reference.abs().max().item()
    theirs = torch.mm(a, b)
    torch_error = (theirs.double() - reference).abs().max().item() / scale
    torch_ms = gpu_ms(lambda: torch.mm(a, b, out=theirs))
    c = torch.full((size, size), float("nan"), device="cuda", dtype=torch.bfloat16)
    if key == "mma":
        args = [a, b, c, size, size, size]
    else:
        args = [TensorMap.tiled(a, (128, 64), swizzle="128B", l2_promotion="256B"),
                TensorMap.tiled(b, (64, 64), swizzle="128B", l2_promotion="256B"), c, size, size, size]
    grid = ((size // cfg.bm) * (size // cfg.bn),)
    with runtime.prepared_launch(module, entry, grid, (cfg.threads,), args, cfg.shared_bytes) as launch:
        launch()
        runtime.wait_for_gpu(KERNEL_TIMEOUT_S, f"{entry} at {size}^3")
        error = (c.double() - reference).abs().max().item() / scale
        error = error if error == error else float("inf")
        if error > ERROR_FACTOR * torch_error:
            return {"status": "WRONG", "error": error, "detail": f"torch.mm's error {torch_error:.2e}"}
        ms = gpu_ms(launch)
    flop = 2.0 * size ** 3
    return {"status": "PASS", "error": error, "ms": ms, "tflops": flop / ms / 1e9,
            "torch_tflops": flop / torch_ms / 1e9, "ratio": torch_ms / ms,
            "detail": f"torch.mm {flop / torch_ms / 1e9:.0f} TFLOP/s, error {torch_error:.2e}"}


def run_step(key: str) -> dict:
    """One step, in this process; the result as a dict (status and details)."""
    try:
        if key == "params":
            return step_params()
        if key in LADDER:
            return step_ladder(key)
        return step_large(key)
    except runtime.GpuTimeout as error:
        print(json.dumps({"status": "HANG", "detail": str(error)}), flush=True)
        os._exit(3)  # the kernel still runs: only ending the process stops it
    except PtxasError as error:
        return {"status": "REJECTED", "detail": str(error)}
    except LaunchError as error:
        return {"status": "FAULT" if " failed (" in str(error) else "ERROR", "detail": str(error)}
    except PhobosError as error:
        return {"status": "ERROR", "detail": str(error)}


# ---------------------------------------------------------------------------- the driver (parent process)

def describe(key: str) -> str:
    if key == "params":
        return "parameter buffer round trip (tensor-map parameters)"
    if key in LADDER:
        return LADDER[key][0]
    return f"checked-in {key} GEMM at {LARGE}^3 beside torch.mm"


def spawn(key: str, timeout_s: float) -> dict:
    command = [sys.executable, __file__, "--step", key]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"status": "HANG", "detail": f"the step did not end within {timeout_s:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    return {"status": "FAULT" if done.returncode else "ERROR", "detail": f"exit {done.returncode}: {tail}"}


def environment() -> dict:
    ok, name = runtime.gpu_available()
    if not ok:
        return {"gpu": None, "why": name}
    props = runtime.device_properties()
    driver = runtime._driver()
    return {"gpu": name, "compute_capability": props.compute_capability,
            "driver": driver.get_driver_version(), "pycuda": __import__("pycuda").VERSION_TEXT}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", choices=STEPS, help="run one step here and print its result as JSON")
    parser.add_argument("--environment", action="store_true", help="print the GPU, driver and PyCUDA as JSON")
    parser.add_argument("--out", default="bench_results")
    parser.add_argument("--budget", type=float, default=170.0, help="seconds after which no step starts")
    args = parser.parse_args()
    if args.step:
        print(json.dumps(run_step(args.step)), flush=True)
        return
    if args.environment:
        print(json.dumps(environment()), flush=True)
        return
    started = time.monotonic()
    env = spawn_environment()
    print(f"tc_bisect on {env}", flush=True)
    rows = []
    for key in STEPS:
        elapsed = time.monotonic() - started
        timeout = min(STEP_TIMEOUT_S.get(key, DEFAULT_STEP_TIMEOUT_S), max(args.budget + 10 - elapsed, 1))
        if elapsed > args.budget:
            result = {"status": "SKIP", "detail": f"time budget of {args.budget:.0f} s spent"}
        else:
            result = spawn(key, timeout)
        result["seconds"] = time.monotonic() - started - elapsed
        rows.append({"step": key, "what": describe(key), "error": NAN, "tflops": NAN, "ratio": NAN, **result})
        print(f"  {key:7} {result['status']:6} {describe(key)}: {result.get('detail', '')}", flush=True)
    from common import save, table

    print(table(rows, [("step", "step", ""), ("status", "result", ""), ("error", "max err/max|C|", ".2e"),
                       ("tflops", "TFLOP/s", ".0f"), ("ratio", "/torch.mm", ".3f"), ("seconds", "s", ".1f")]))
    failing = next((row for row in rows if row["status"] not in ("PASS", "SKIP")), None)
    if failing is None:
        print("every step passed" if all(r["status"] == "PASS" for r in rows) else "no step failed (some skipped)")
    else:
        print(f"first failing step: {failing['step']} ({failing['what']}): {failing['status']}: {failing['detail']}")
    if env.get("gpu"):  # saving names the device, which needs one
        meta = {"environment": env, "size_small": SMALL, "size_large": LARGE}
        print(f"wrote {save('tc_bisect', rows, meta, args.out)}")
    sys.exit(0 if failing is None else 1)


def spawn_environment() -> dict:
    """The GPU, driver and PyCUDA versions, read in a child process (the parent keeps no context)."""
    done = subprocess.run([sys.executable, __file__, "--environment"], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {"gpu": None, "why": done.stderr.strip()[-300:]}


if __name__ == "__main__":
    main()
