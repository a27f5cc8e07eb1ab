# What the GPU's approximate instructions give, measured: ex2, lg2, rsqrt,
# rcp, sqrt, sin, cos and tanh `.approx` (f32, ftz and not, and the f16/bf16
# forms) run on the GPU over whole binades and random samples, for the
# emulator's models of them (phobos/run/emulator/numerics.py) and the ulp
# distances docs/emulator.md states.
#
#     python tools/measure_approx.py --out DIR          # on the GPU machine (PyCUDA)
#
# Writes to DIR, one compressed NumPy file per function family (each under
# the 16 MiB a file the GPU machine sends back):
#   <file>.npz   (FILES) for each f32 instruction and binade [2^e, 2^(e+1))
#                (or its negative) swept: `delta_<op>_<binade>`, the GPU's
#                result minus the f32-rounded float64 value in ulps (through
#                the ordered integers of the bits), as bz2-compressed int8,
#                int16 or int32 bytes; `sha_...` the sha256 of the GPU's raw result bits
#                (a rebuilt table checks itself against it); for random samples
#                `sample_<op>_<k>` the inputs and `result_<op>_<k>` the raw
#                result bits.  The ftz form is swept; summary.json says whether
#                the other form gives the same bits over the binade.
#   half16.npz   every one of the 65536 inputs of each 16-bit instruction, raw,
#                and whether the x2 forms agree with the scalar ones lane by lane.
#   summary.json per instruction and set of inputs: how many results are the
#                correctly rounded value, the largest ulp distance, counts by
#                distance.
from __future__ import annotations

import argparse
import hashlib
import bz2
import json
import sys
from pathlib import Path

import numpy as np

# op -> (float64 reference, binades swept whole as (sign, exponent), random sample ranges)
F32 = {
    "ex2": (np.exp2, [(1, -1), (1, 0), (-1, -1), (-1, 0), (1, -8), (1, 3)], [(-130.0, 130.0), (-1.0, 1.0)]),
    "lg2": (np.log2, [(1, 0), (1, -1), (1, 1), (1, 2), (1, -2), (1, 20), (1, -20), (1, -126)],
            [(0.0, 0.0), (0.5, 2.0)]),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), [(1, 0), (1, 1)], [(0.0, 0.0)]),
    "rcp": (lambda x: 1.0 / x, [(1, 0)], [(0.0, 0.0)]),
    "sqrt": (np.sqrt, [(1, 0), (1, 1)], [(0.0, 0.0)]),
    "sin": (np.sin, [(1, 0), (1, -2), (1, 1), (1, 2)], [(-100.0, 100.0), (-1e5, 1e5)]),
    "cos": (np.cos, [(1, 0), (1, -2), (1, 1), (1, 2)], [(-100.0, 100.0), (-1e5, 1e5)]),
    "tanh": (np.tanh, [(1, -1), (1, 0), (1, -4), (1, 2)], [(-12.0, 12.0), (-1e-3, 1e-3)]),
}
# the f32 instructions measured: op -> PTX forms (tanh has no ftz form: it flushes anyway)
F32_FORMS = {op: [f"{op}.approx.ftz.f32", f"{op}.approx.f32"] for op in F32}
F32_FORMS["tanh"] = ["tanh.approx.f32"]
HALF16 = ["ex2.approx.f16", "ex2.approx.ftz.bf16", "tanh.approx.f16", "tanh.approx.bf16"]
HALF16_X2 = {"ex2.approx.f16": "ex2.approx.f16x2", "ex2.approx.ftz.bf16": "ex2.approx.ftz.bf16x2",
             "tanh.approx.f16": "tanh.approx.f16x2", "tanh.approx.bf16": "tanh.approx.bf16x2"}
# the files written: the GPU machine sends back at most 8, of 16 MiB each
FILES = {"exp_log": ["ex2", "lg2"], "roots": ["rsqrt", "rcp", "sqrt"], "trig": ["sin", "cos"], "tanh": ["tanh"]}
LIMIT_BYTES = 15 << 20
SAMPLE = 1 << 16
BLOCK = 256


def kernel_ptx(instruction: str) -> str:
    """A kernel applying `instruction` to n inputs: out[i] = instruction(in[i]), over 32-bit words (an f32,
    or an x2 pair) or 16-bit ones."""
    wide = instruction.endswith(("f32", "x2"))
    word, reg = ("b32", "r") if wide else ("b16", "h")
    size = 4 if wide else 2
    operand = "%f1" if instruction.endswith("f32") else ("%r7" if wide else "%h1")
    result = "%f2" if instruction.endswith("f32") else ("%r8" if wide else "%h2")
    move_in = f"mov.b32 %f1, %r7;" if instruction.endswith("f32") else ""
    move_out = f"mov.b32 %r8, %f2;" if instruction.endswith("f32") else ""
    load = f"ld.global.{word} %{'r7' if wide else 'h1'}, [%rd5];"
    store = f"st.global.{word} [%rd6], %{'r8' if wide else 'h2'};"
    return f"""
.version 8.3
.target sm_90a
.address_size 64
.visible .entry apply(.param .u64 out, .param .u64 in, .param .u32 n)
{{
    .reg .b32 %r<9>;
    .reg .f32 %f<3>;
    .reg .b16 %h<3>;
    .reg .b64 %rd<7>;
    .reg .pred %p1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.u32 %r4, %r1, %r2, %r3;
    ld.param.u32 %r5, [n];
    setp.ge.u32 %p1, %r4, %r5;
    @%p1 bra DONE;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [in];
    mul.wide.u32 %rd3, %r4, {size};
    add.u64 %rd5, %rd2, %rd3;
    add.u64 %rd6, %rd1, %rd3;
    {load}
    {move_in}
    {instruction} {result}, {operand};
    {move_out}
    {store}
DONE:
    ret;
}}
"""


class Gpu:
    """Runs one instruction over arrays of input bits on the GPU (PyCUDA)."""

    def __init__(self):
        import pycuda.autoinit  # noqa: F401
        import pycuda.driver as driver
        self.driver, self.functions = driver, {}

    def apply(self, instruction: str, bits: np.ndarray) -> np.ndarray:
        if instruction not in self.functions:
            module = self.driver.module_from_buffer(kernel_ptx(instruction).encode())
            self.functions[instruction] = module.get_function("apply")
        bits = np.ascontiguousarray(bits)
        out = np.empty_like(bits)
        self.functions[instruction](self.driver.Out(out), self.driver.In(bits), np.uint32(bits.size),
                                    block=(BLOCK, 1, 1), grid=((bits.size + BLOCK - 1) // BLOCK, 1))
        return out


def ordered(bits: np.ndarray) -> np.ndarray:
    """The f32 bits as integers in the order of their values (-0.0 and +0.0 both 0)."""
    i = bits.astype(np.uint32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def reference(fn, bits: np.ndarray) -> np.ndarray:
    """The f32 bits of the float64 value of `fn`, rounded once."""
    with np.errstate(all="ignore"):
        return fn(bits.view(np.float32).astype(np.float64)).astype(np.float32).view(np.uint32)


def binade(sign: int, exponent: int) -> np.ndarray:
    """Every f32 of [2^exponent, 2^(exponent + 1)), negated for sign -1, as bits."""
    base = ((0 if sign > 0 else 1) << 31) | ((exponent + 127) << 23)
    return np.arange(base, base + (1 << 23), dtype=np.uint64).astype(np.uint32)


def sample(rng, low: float, high: float) -> np.ndarray:
    """SAMPLE random inputs: uniform in [low, high), or uniform bit patterns where both are 0."""
    if low == high == 0.0:
        return rng.integers(0, 1 << 32, SAMPLE, dtype=np.uint64).astype(np.uint32)
    return rng.uniform(low, high, SAMPLE).astype(np.float32).view(np.uint32)


def distances(got: np.ndarray, want: np.ndarray) -> dict:
    """How far the GPU's results are from the correctly rounded ones (NaNs apart)."""
    nan = np.isnan(got.view(np.float32)) | np.isnan(want.view(np.float32))
    d = np.abs(ordered(got) - ordered(want))[~nan]
    values, counts = np.unique(np.minimum(d, 1000), return_counts=True)
    return {"inputs": int(got.size), "nan": int(nan.sum()), "exact": float((d == 0).mean()) if d.size else 1.0,
            "max_ulps": int(d.max()) if d.size else 0,
            "counts": {int(v): int(c) for v, c in zip(values, counts)},
            "nan_disagree": int((np.isnan(got.view(np.float32)) != np.isnan(want.view(np.float32))).sum())}


def binade_label(form: str, sign: int, exponent: int) -> str:
    """The name of one swept binade of `form` in summary.json, e.g. `ex2.approx.ftz.f32_-2^0`."""
    return f"{form}_{'-' if sign < 0 else ''}2^{exponent}"


def array_key(label: str) -> str:
    """`label` as a name NumPy's .npz files take."""
    return label.replace(".", "_").replace("^", "").replace("-", "m")


def packed(delta: np.ndarray) -> np.ndarray:
    """`delta` as the bytes of its bz2-compressed int8, int16 or int32 array (the narrowest that holds it)."""
    largest = np.abs(delta).max()
    small = np.int8 if largest < 1 << 7 else np.int16 if largest < 1 << 15 else np.int32
    return np.frombuffer(bz2.compress(delta.astype(small).tobytes(), 9), np.uint8)


def measure_f32(gpu: Gpu, out: Path, summary: dict, only: set[str] | None = None) -> None:
    rng = np.random.default_rng(2026)
    for name, ops in FILES.items():
        ops = [op for op in ops if only is None or op in only]
        if not ops:
            continue
        arrays = {}
        for op in ops:
            fn, binades, samples = F32[op]
            ftz = F32_FORMS[op][0]
            for sign, exponent in binades:   # swept with the first form; the others compared with it
                bits = binade(sign, exponent)
                got, want = gpu.apply(ftz, bits), reference(fn, bits)
                label = binade_label(ftz, sign, exponent)
                summary[label] = distances(got, want)
                summary[label]["same_in_other_forms"] = {f: bool(np.array_equal(gpu.apply(f, bits), got))
                                                         for f in F32_FORMS[op][1:]}
                key = array_key(label)
                arrays[f"delta_{key}"] = packed(ordered(got) - ordered(want))
                arrays[f"sha_{key}"] = np.frombuffer(hashlib.sha256(got.tobytes()).digest(), np.uint8)
                print(f"{label:<32} exact {summary[label]['exact']:.3f}  max {summary[label]['max_ulps']} ulps  "
                      f"{arrays[f'delta_{key}'].size / 2**20:.2f} MiB", flush=True)
            for form in F32_FORMS[op]:
                for k, (low, high) in enumerate(samples):
                    bits = sample(rng, low, high)
                    got = gpu.apply(form, bits)
                    label = f"{form}_sample{k}"
                    summary[label] = distances(got, reference(fn, bits))
                    key = label.replace(".", "_")
                    arrays[f"sample_{key}"], arrays[f"result_{key}"] = bits, got
                    print(f"{label:<32} exact {summary[label]['exact']:.3f}  max {summary[label]['max_ulps']} ulps",
                          flush=True)
        while sum(a.nbytes for a in arrays.values()) > LIMIT_BYTES:   # what the machine sends back
            dropped = [k for k in arrays if k.startswith("delta_")][-1]
            summary.setdefault("dropped_for_size", []).append(dropped)
            del arrays[dropped], arrays["sha_" + dropped[len("delta_"):]]
        np.savez(out / f"{name}.npz", **arrays)


def measure_half(gpu: Gpu, out: Path, summary: dict) -> None:
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    arrays = {}
    for form in HALF16:
        table = gpu.apply(form, every)
        arrays[form.replace(".", "_")] = table
        packed = every.astype(np.uint32) | (every[::-1].astype(np.uint32) << 16)   # two lanes, different inputs
        pair = gpu.apply(HALF16_X2[form], packed)
        agree = bool(np.array_equal(pair & 0xFFFF, table) and np.array_equal(pair >> 16, table[::-1]))
        summary[HALF16_X2[form]] = {"agrees_with_scalar": agree}
        print(f"{form:<24} table of 65536; {HALF16_X2[form]} agrees lane by lane: {agree}", flush=True)
    np.savez_compressed(out / "half16.npz", **arrays)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure the GPU's .approx instructions.")
    parser.add_argument("--out", type=Path, required=True, help="directory for the .npz files and summary.json")
    parser.add_argument("--only", help="measure only these f32 instructions, comma-separated (e.g. lg2,sin); "
                        "the 16-bit forms are then not measured")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    gpu, summary = Gpu(), {}
    only = set(args.only.split(",")) if args.only else None
    if only is None:
        measure_half(gpu, args.out, summary)
    measure_f32(gpu, args.out, summary, only)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    for path in sorted(args.out.iterdir()):
        print(f"{path.name}: {path.stat().st_size / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
