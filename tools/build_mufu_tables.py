# Builds phobos/run/emulator/mufu_tables.npz, the emulator's tables of the GPU's
# multifunction unit (phobos/run/emulator/mufu.py), from what
# tools/measure_approx.py measured on the GPU:
#
#     python tools/build_mufu_tables.py MEASURED_DIR [--out PATH] [--tests PATH]
#
# Each f32 table is one swept binade's results (checked against the sha256 of
# the GPU's raw bits that the measurement stored), as int8 deltas in ulps from
# mufu.reference_bits, lzma-compressed; each 16-bit table is every result of
# the form, as int16 differences from the previous one, lzma-compressed.
# lg2's table is F(m), the unit's fixed-point log2 of each significand (see
# mufu.py), read off the binades [1, 2) and [0.5, 1), stored the same way,
# with the inputs of any swept binade that the rule does not give as
# exceptions.
# It also writes tests/data/mufu_measured.npz, the tests' sample of the GPU's
# results: for every form, `input_<form>` and `result_<form>` bits, SUBSET of
# each swept binade and of each random sample.
from __future__ import annotations

import argparse
import bz2
import hashlib
import lzma
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_approx as ma  # noqa: E402

from phobos.run.emulator import mufu  # noqa: E402

FILE_OF = {op: name for name, ops in ma.FILES.items() for op in ops}
# table -> (instruction swept, the binades (sign, exponent) it is made of, in index order)
F32_TABLES = {"rcp": ("rcp", [(1, 0)]), "rsqrt": ("rsqrt", [(1, 0), (1, 1)]),
              "sqrt": ("sqrt", [(1, 0), (1, 1)]), "ex2": ("ex2", [(1, 0)])}
HALF_TABLES = {"ex2.f16": "ex2.approx.f16", "ex2.bf16": "ex2.approx.ftz.bf16",
               "tanh.f16": "tanh.approx.f16", "tanh.bf16": "tanh.approx.bf16"}
PRESET = 9 | lzma.PRESET_EXTREME
TESTS = Path(__file__).resolve().parent.parent / "tests" / "data" / "mufu_measured.npz"
SUBSET = 512


def measured_binade(directory: Path, op: str, sign: int, exponent: int) -> np.ndarray:
    """The GPU's result bits over one swept binade, rebuilt from the stored deltas and checked."""
    form = ma.F32_FORMS[op][0]
    key = ma.array_key(ma.binade_label(form, sign, exponent))
    with np.load(directory / f"{FILE_OF[op]}.npz") as stored:
        raw, sha = bz2.decompress(stored[f"delta_{key}"].tobytes()), stored[f"sha_{key}"].tobytes()
    delta = np.frombuffer(raw, {1: np.int8, 2: np.int16, 4: np.int32}[len(raw) >> 23]).astype(np.int64)
    bits = ma.binade(sign, exponent)
    got = mufu.from_ordered(ma.ordered(ma.reference(ma.F32[op][0], bits)) + delta)
    if hashlib.sha256(got.tobytes()).digest() != sha:
        raise SystemExit(f"{key}: the rebuilt results do not match the GPU's sha256")
    return got


def f32_table(directory: Path, name: str) -> np.ndarray:
    op, binades = F32_TABLES[name]
    got = np.concatenate([measured_binade(directory, op, s, e) for s, e in binades])
    if name == "ex2":  # measured on [1, 2): 2^(1 + f), the table holds 2^f
        got = got - np.uint32(1 << 23)
    delta = ma.ordered(got) - mufu.ordered(mufu.reference_bits(name))
    assert np.abs(delta).max() < 128, name
    return np.frombuffer(lzma.compress(delta.astype(np.int8).tobytes(), preset=PRESET), np.uint8)


def lg2_tables(directory: Path) -> tuple[np.ndarray, np.ndarray]:
    """lg2's F(m), lzma-compressed int16 steps, and its exceptions: (input bits, result bits) of every swept
    binade where the rule differs from the GPU.  [1, 2) gives F truncated toward zero to f32 and [0.5, 1)
    gives -1 + F so: each bounds the integer 2^36 F(m); the smallest integer within both is kept (where the
    bounds do not meet, [0.5, 1)'s lower one: the inputs of [1, 2) that it misses are exceptions)."""
    scale = 2.0 ** mufu.LG2_BITS

    def ulp(v):
        return np.ldexp(1.0, np.frexp(np.where(v == 0, 1.0, v))[1] - 24)
    one = measured_binade(directory, "lg2", 1, 0).view(np.float32).astype(np.float64)      # trunc(F)
    half = -measured_binade(directory, "lg2", 1, -1).view(np.float32).astype(np.float64)   # trunc(1 - F)
    low = np.maximum(np.ceil(one * scale), np.floor((1 - half - ulp(half)) * scale) + 1)
    fixed = low.astype(np.int64)
    steps = np.diff(fixed, prepend=0)
    assert np.abs(steps).max() < 1 << 15
    inputs, results = [], []
    for sign, exponent in ma.F32["lg2"][1]:
        bits = ma.binade(sign, exponent)
        got = measured_binade(directory, "lg2", sign, exponent)
        rule = mufu.toward_zero((exponent << mufu.LG2_BITS) + fixed, mufu.LG2_BITS).view(np.uint32)
        wrong = np.flatnonzero(rule != got)
        print(f"lg2 2^{exponent}: the rule gives {1 - wrong.size / bits.size:.7f} of the binade")
        inputs.append(bits[wrong])
        results.append(got[wrong])
    inputs, results = np.concatenate(inputs), np.concatenate(results)
    order = np.argsort(inputs)
    return (np.frombuffer(lzma.compress(steps.astype(np.int16).tobytes(), preset=PRESET), np.uint8),
            np.concatenate([inputs[order], results[order]]).astype(np.uint32))


def half_table(directory: Path, name: str) -> np.ndarray:
    with np.load(directory / "half16.npz") as stored:
        results = stored[HALF_TABLES[name].replace(".", "_")]
    steps = np.diff(results.astype(np.int64), prepend=0).astype(np.int16)
    return np.frombuffer(lzma.compress(steps.tobytes(), preset=PRESET), np.uint8)


def test_subset(directory: Path) -> dict[str, np.ndarray]:
    """SUBSET inputs and the GPU's results of every measured form the tables model, drawn at random
    from each swept binade and each random sample."""
    rng, subset = np.random.default_rng(42), {}
    for op in [op for op, _ in F32_TABLES.values()] + ["lg2"]:
        inputs, results = [], []
        for sign, exponent in ma.F32[op][1]:
            pick = rng.choice(1 << 23, SUBSET, replace=False)
            inputs.append(ma.binade(sign, exponent)[pick])
            results.append(measured_binade(directory, op, sign, exponent)[pick])
        swept = (np.concatenate(inputs), np.concatenate(results))
        for form in ma.F32_FORMS[op]:  # the forms agree over the swept binades
            inputs, results = [swept[0]], [swept[1]]
            with np.load(directory / f"{FILE_OF[op]}.npz") as stored:
                for key in stored.files:
                    if key.startswith(f"sample_{form.replace('.', '_')}_sample"):
                        pick = rng.choice(stored[key].size, SUBSET, replace=False)
                        inputs.append(stored[key][pick])
                        results.append(stored["result_" + key[len("sample_"):]][pick])
            subset[f"input_{form}"], subset[f"result_{form}"] = np.concatenate(inputs), np.concatenate(results)
    with np.load(directory / "half16.npz") as stored:
        for form in HALF_TABLES.values():
            pick = np.sort(rng.choice(1 << 16, 4 * SUBSET, replace=False)).astype(np.uint16)
            subset[f"input_{form}"], subset[f"result_{form}"] = pick, stored[form.replace(".", "_")][pick]
    return subset


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the emulator's tables of the GPU's MUFU.")
    parser.add_argument("measured", type=Path, help="directory that tools/measure_approx.py wrote")
    parser.add_argument("--out", type=Path, default=mufu.TABLES)
    parser.add_argument("--tests", type=Path, default=TESTS, help="where the tests' sample goes")
    args = parser.parse_args(argv)
    tables = {name: f32_table(args.measured, name) for name in F32_TABLES}
    tables["lg2"], tables["lg2_exceptions"] = lg2_tables(args.measured)
    tables.update({name: half_table(args.measured, name) for name in HALF_TABLES})
    np.savez(args.out, **tables)
    for name, packed in tables.items():
        print(f"{name:<10} {packed.size / 1024:8.1f} KiB")
    print(f"{args.out}: {args.out.stat().st_size / 1024:.1f} KiB")
    np.savez_compressed(args.tests, **test_subset(args.measured))
    print(f"{args.tests}: {args.tests.stat().st_size / 1024:.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
