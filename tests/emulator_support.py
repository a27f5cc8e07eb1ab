# Helpers for the PTX emulator tests: the hand-written PTX kernels in
# tests/data/emulator, validation of PTX text with ptxas, and a generator of
# one-instruction kernels (`out[i] = OP(in0[i], in1[i], ...)`) for testing the
# numerics of single instructions.
from __future__ import annotations

import functools
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from phobos.run.emulator import Module
from phobos.run.emulator.ptxtypes import TYPES

DATA = Path(__file__).parent / "data" / "emulator"


def find_ptxas() -> str | None:
    found = shutil.which("ptxas")
    if found:
        return found
    default = "/usr/local/cuda/bin/ptxas"
    return default if os.access(default, os.X_OK) else None


PTXAS = find_ptxas()


@functools.lru_cache(maxsize=None)
def ptxas_errors(text: str, arch: str = "sm_90") -> str | None:
    """ptxas's complaints about a PTX text (None if it assembles)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(text)
        done = subprocess.run([PTXAS, f"-arch={arch}", str(path), "-o", os.devnull],
                              capture_output=True, text=True)
    return None if done.returncode == 0 else done.stderr


@functools.lru_cache(maxsize=None)
def cubin_parameter_layout(text: str, kernel: str, arch: str) -> list[tuple[int, int]]:
    """(offset, size) of each parameter of `kernel` in its parameter buffer, as ptxas compiles
    `text` for `arch`: the EIATTR_KPARAM_INFO records of the cubin's .nv.info.<kernel> section
    (what the driver's cuFuncGetParamInfo reports)."""
    with tempfile.TemporaryDirectory() as tmp:
        source, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        source.write_text(text)
        subprocess.run([PTXAS, f"-arch={arch}", str(source), "-o", str(cubin)], check=True, capture_output=True)
        data = cubin.read_bytes()
    section_offset, = struct.unpack_from("<Q", data, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", data, section_offset + i * entry_size) for i in range(count)]
    names = sections[names_index][4]

    def name(section) -> str:
        start = names + section[0]
        return data[start:data.index(b"\0", start)].decode()

    info = next(s for s in sections if name(s) == f".nv.info.{kernel}")
    layout = {}
    at, end = info[4], info[4] + info[5]
    while at < end:  # records: format, attribute, u16 (value, or the size of what follows for format 4)
        form, attribute, size = struct.unpack_from("<BBH", data, at)
        if attribute == 0x17:  # EIATTR_KPARAM_INFO: index u32, ordinal u16, offset u16, flags u32 (size << 18)
            _, ordinal, offset, flags = struct.unpack_from("<IHHI", data, at + 4)
            layout[ordinal] = (offset, flags >> 18)
        at += 4 + (size if form == 4 else 0)
    return [layout[i] for i in range(len(layout))]


def assert_valid_ptx(text: str) -> None:
    """Fail if ptxas rejects the text; do nothing where ptxas is not installed."""
    if PTXAS is not None:
        errors = ptxas_errors(text)
        assert errors is None, errors


@functools.lru_cache(maxsize=None)
def data_module(name: str) -> Module:
    return Module((DATA / name).read_text(), name)


def source_text(name: str) -> str:
    return (DATA / name).read_text()


# ------------------------------------------------------------ elementwise kernels

def _register_type(t: str) -> str:
    if t in ("f32", "f64", "pred"):
        return t
    bits = TYPES[t].bits
    return f"b{max(bits, 16)}"


def _memory_type(t: str) -> str:
    """The ld/st type of an element: 8-bit integers by value, 16-bit floats as bits."""
    if t in ("f16", "bf16"):
        return "b16"
    return "u8" if t == "pred" else t


def numpy_dtype(t: str) -> np.dtype:
    return np.dtype(np.uint8) if t == "pred" else TYPES[t].dtype


def elementwise_ptx(instruction: str, out: str, inputs: list[str]) -> str:
    """PTX of a kernel k(out, in0, ..., n) computing out[i] = instruction(in0[i], ...).

    The instruction is written with %d for the result and %a0, %a1, ... for the
    operands, e.g. "fma.rn.f32 %d, %a0, %a1, %a2;".
    """
    params = ",\n".join([".param .u64 k_out"] + [f".param .u64 k_in{i}" for i in range(len(inputs))]
                        + [".param .u32 k_n"])
    decls = [f".reg .{_register_type(out)} %d;"]
    decls += [f".reg .{_register_type(t)} %a{i};" for i, t in enumerate(inputs)]
    loads = []
    for i, t in enumerate(inputs):
        size = TYPES[t].size if t != "pred" else 1
        loads.append(f"ld.param.u64 %rd1, [k_in{i}];\nmul.wide.u32 %rd2, %r2, {size};\n"
                     f"add.s64 %rd1, %rd1, %rd2;")
        if t == "pred":
            loads.append(f"ld.global.u8 %h1, [%rd1];\nsetp.ne.b16 %a{i}, %h1, 0;")
        else:
            loads.append(f"ld.global.{_memory_type(t)} %a{i}, [%rd1];")
    size = TYPES[out].size if out != "pred" else 1
    store = [f"ld.param.u64 %rd1, [k_out];\nmul.wide.u32 %rd2, %r2, {size};\nadd.s64 %rd1, %rd1, %rd2;"]
    if out == "pred":
        store.append("selp.u16 %h1, 1, 0, %d;\nst.global.u8 [%rd1], %h1;")
    else:
        store.append(f"st.global.{_memory_type(out)} [%rd1], %d;")
    body = "\n".join(decls + [
        "ld.param.u32 %r1, [k_n];",
        "mov.u32 %r2, %tid.x;", "mov.u32 %r3, %ctaid.x;", "mov.u32 %r4, %ntid.x;",
        "mad.lo.s32 %r2, %r3, %r4, %r2;",
        "setp.ge.u32 %p1, %r2, %r1;", "@%p1 bra $L__done;",
    ] + loads + [instruction] + store + ["$L__done:", "ret;"])
    return (".version 8.5\n.target sm_90\n.address_size 64\n\n"
            f".visible .entry k(\n{params}\n)\n{{\n.reg .pred %p<2>;\n.reg .b32 %r<5>;\n"
            f".reg .b64 %rd<3>;\n.reg .b16 %h<2>;\n{body}\n}}\n")


@functools.lru_cache(maxsize=None)
def _elementwise_module(instruction: str, out: str, inputs: tuple[str, ...]) -> Module:
    text = elementwise_ptx(instruction, out, list(inputs))
    assert_valid_ptx(text)
    return Module(text, "elementwise.ptx")


def run_elementwise(instruction: str, out: str, *inputs: tuple[str, np.ndarray]) -> np.ndarray:
    """Run `instruction` on the arrays (each given with its PTX type); return the results."""
    module = _elementwise_module(instruction, out, tuple(t for t, _ in inputs))
    n = len(inputs[0][1])
    arrays = [np.ascontiguousarray(a, numpy_dtype(t)) for t, a in inputs]
    result = np.zeros(n, numpy_dtype(out))
    module.launch("k", (-(-n // 128),), (128,), [result, *arrays, n])
    return result
