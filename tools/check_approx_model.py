# The emulator's `.approx` instructions against the GPU's, on fresh inputs:
#
#     python tools/check_approx_model.py --json approx_model.json      # on the GPU machine (PyCUDA)
#     python tools/check_approx_model.py --dry-run                     # anywhere: the emulator's side only
#
# Every form tools/measure_approx.py measures (ex2, lg2, rsqrt, rcp, sqrt, sin,
# cos, tanh .approx of f32, .ftz and not; ex2 and tanh of f16 and bf16, and
# their x2 pairs) runs on COUNT inputs per f32 form - half uniform bit patterns
# (NaNs, infinities, zeros, subnormals among them), half uniform values in the
# ranges measure_approx.F32 samples - and on every 16-bit input (the x2 forms
# on random pairs), through the GPU (measure_approx.Gpu) and through the
# emulator's function of the instruction (ops_arith.approx_function, what a
# kernel's instruction runs).  It prints, per form, the inputs, the fraction of
# results bit for bit identical, and the largest distance in ulps of the
# result's format (NaNs compared as NaN or not); --json writes the table.
# Forms docs/emulator.md states as bit for bit must show 1.0 identical.
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_approx as ma  # noqa: E402

from phobos.run.emulator import ops_arith  # noqa: E402

COUNT = 1 << 22


def f32_inputs(rng: np.random.Generator, op: str, count: int) -> np.ndarray:
    """count f32 bit patterns: half uniform bits, the rest uniform over op's sample ranges."""
    ranges = [r for r in ma.F32[op][2] if r != (0.0, 0.0)]
    uniform = count - count // 2 if ranges else count
    parts = [rng.integers(0, 1 << 32, uniform, dtype=np.uint64).astype(np.uint32)]
    for k, (low, high) in enumerate(ranges):
        n = count // 2 // len(ranges) + (k < count // 2 % len(ranges))
        parts.append(rng.uniform(low, high, n).astype(np.float32).view(np.uint32))
    return np.concatenate(parts)


def half_inputs(rng: np.random.Generator, form: str) -> np.ndarray:
    """Every 16-bit input, or for a pair form every input in the low half and a random one in the high."""
    every = np.arange(1 << 16, dtype=np.uint32)
    if form.endswith("x2"):
        return every | (rng.permutation(every) << 16)
    return every.astype(np.uint16)


def emulated(form: str, bits: np.ndarray) -> np.ndarray:
    """The emulator's result bits of PTX instruction `form` (e.g. rsqrt.approx.ftz.f32) on raw `bits`."""
    op, *modifiers = form.split(".")
    type_name = modifiers[-1]
    fn = ops_arith.approx_function(op, type_name, "ftz" in modifiers)
    with np.errstate(all="ignore"):
        if type_name == "f32":
            return np.asarray(fn(bits.view(np.float32)), np.float32).view(np.uint32)
        if type_name == "f16":
            return np.asarray(fn(bits.view(np.float16)), np.float16).view(np.uint16)
        return np.asarray(fn(bits))


def _ordered(bits: np.ndarray, width: int) -> np.ndarray:
    sign = np.int64(1) << (width - 1)
    b = bits.astype(np.int64)
    return np.where(b & sign, -(b & (sign - 1)), b)


def _is_nan(bits: np.ndarray, width: int, exponent_bits: int) -> np.ndarray:
    b = bits.astype(np.int64)
    mantissa = width - 1 - exponent_bits
    full = (1 << exponent_bits) - 1
    return (((b >> mantissa) & full) == full) & ((b & ((1 << mantissa) - 1)) != 0)


FORMATS = {"f32": (32, 8), "f16": (16, 5), "bf16": (16, 8)}


def compare(form: str, got: np.ndarray, want: np.ndarray) -> dict:
    """How the emulator's results (`got`) stand to the GPU's (`want`)."""
    type_name = form.rsplit(".", 1)[1]
    halves = [(got, want)]
    if type_name.endswith("x2"):
        type_name = type_name[:-2]
        halves = [(got & 0xFFFF, want & 0xFFFF), (got >> 16, want >> 16)]
    width, exponent_bits = FORMATS[type_name]
    distance, nan_disagree, identical = [], 0, 0
    for g, w in halves:
        identical += int((g == w).sum())
        gn, wn = _is_nan(g, width, exponent_bits), _is_nan(w, width, exponent_bits)
        nan_disagree += int((gn != wn).sum())
        numbers = ~(gn | wn)
        distance.append(np.abs(_ordered(g[numbers], width) - _ordered(w[numbers], width)))
    distance = np.concatenate(distance)
    elements = sum(g.size for g, _ in halves)
    return {"form": form, "inputs": int(got.size), "identical": identical / elements,
            "max_ulps": int(distance.max()) if distance.size else 0, "nan_disagree": nan_disagree}


def forms() -> list[str]:
    out = [form for op in ma.F32 for form in ma.F32_FORMS[op]]
    for form in ma.HALF16:
        out += [form, ma.HALF16_X2[form]]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Compare the emulator's .approx instructions with the GPU's.")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: run the emulator's side only")
    parser.add_argument("--count", type=int, default=COUNT, help="inputs per f32 form (default 2^22)")
    parser.add_argument("--json", type=Path, help="write the table here")
    parser.add_argument("--seed", type=int, default=20260)
    args = parser.parse_args(argv)
    gpu = None if args.dry_run else ma.Gpu()
    rng = np.random.default_rng(args.seed)
    rows = []
    print(f"{'instruction':<26} {'inputs':>9} {'identical':>10} {'max ulps':>9} {'NaN differ':>10}")
    for form in forms():
        started = time.perf_counter()
        bits = f32_inputs(rng, form.split(".")[0], args.count) if form.endswith("f32") else half_inputs(rng, form)
        mine = emulated(form, bits)
        if gpu is None:
            print(f"{form:<26} {bits.size:>9} {'-':>10} {'-':>9} {'-':>10}   emulator {time.perf_counter() - started:.2f} s")
            continue
        row = compare(form, mine, gpu.apply(form, bits))
        rows.append(row)
        print(f"{form:<26} {row['inputs']:>9} {row['identical']:>10.6f} {row['max_ulps']:>9} {row['nan_disagree']:>10}",
              flush=True)
    if args.json and rows:
        args.json.write_text(json.dumps({"seed": args.seed, "count": args.count, "forms": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
