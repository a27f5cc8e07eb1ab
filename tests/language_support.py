# Running one kernel the three ways Phobos can run it, for the tests of the
# language's constructs: the interpreter (the meaning), the PTX emulator (the
# generated code, on the CPU) and the GPU (marked `gpu`; skipped without one).
# `MODES` parametrizes a test over them; `run` calls a kernel on copies of the
# arguments and returns them, so one test compares every mode with NumPy.
from __future__ import annotations

import os
import subprocess
import tempfile

import numpy as np
import pytest

import phobos
from tests.emulator_support import PTXAS

MODES = ["interpret", "emulate", pytest.param("gpu", marks=pytest.mark.gpu)]
ARCHS = ("sm_75", "sm_90")


def run(src: str, mode: str, *args, grid=None, config=None, kernel=None):
    """Launch `kernel` of `src` in `mode` on copies of `args`; the copies, after the launch.

    In the emulator's mode the PTX is also checked with ptxas for sm_75 and sm_90."""
    if mode == "emulate":
        assert_ptxas_accepts(src, config, kernel)
    mod = phobos.jit(src, filename="test.phobos", mode=mode)
    fn = mod.kernels[kernel] if kernel else next(iter(mod.kernels.values()))
    if config:
        fn = fn.configure(**config)
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    (fn[grid] if grid is not None else fn)(*copies)
    return copies


def ptxas_errors(src: str, arch: str, config=None, kernel=None) -> str | None:
    """ptxas's complaints about the PTX of `src` for `arch` (None: accepted, or no ptxas here)."""
    ptx = phobos.compile_to_ptx(src, arch=arch, config=config, kernel=kernel)
    if PTXAS is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        done = subprocess.run([PTXAS, f"-arch={arch}", path, "-o", os.devnull], capture_output=True, text=True)
    return None if done.returncode == 0 else done.stderr


def assert_ptxas_accepts(src: str, config=None, kernel=None) -> None:
    for arch in ARCHS:
        errors = ptxas_errors(src, arch, config, kernel)
        assert errors is None, f"{arch}: {errors}"
