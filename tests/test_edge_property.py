# The standing property test of the edge contract: random valid kernels
# (tests/kernel_generator.py: slices with starts of every index type, near
# 2^31, 2^32, 2^63 and negative, random sizes, element types and
# configurations) run in the interpreter and in the PTX emulator, whose
# bounds, alignment and race checks are on.  The two must agree exactly, and
# no access may leave its tensor (the emulator stops at the first that does).
# The same kernels assemble with ptxas for the oldest and newest targets, and
# on a GPU (tests marked `gpu`) give the interpreter's results too.
# PHOBOS_FUZZ_SCALE multiplies the number of examples (tools/fuzz_campaign.py).
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, note

import phobos
from phobos.compiler import compile
from phobos.ptxcheck import check

from .emulator_support import PTXAS
from .fuzzing import fuzz_settings
from .kernel_generator import GeneratedKernel, kernels


def run(generated: GeneratedKernel, mode: str) -> list[np.ndarray]:
    kernel = phobos.kernel(generated.source, filename="generated.phobos", mode=mode)
    arguments = generated.arguments()
    kernel.configure(**generated.config)[generated.grid](*arguments)
    return arguments[:len(generated.arrays)]


def describe(generated: GeneratedKernel) -> None:
    note(generated.source)
    note(f"config {generated.config}, grid {generated.grid}, scalars {generated.scalars}")


def assert_same_results(generated: GeneratedKernel, mode: str) -> None:
    describe(generated)
    interpreted = run(generated, "interpret")
    other = run(generated, mode)
    for name, a, b in zip(generated.arrays, interpreted, other):
        np.testing.assert_array_equal(b, a, err_msg=f"tensor {name}")


@fuzz_settings(100)
@given(kernels())
def test_interpreter_and_emulator_agree_and_stay_inside(generated):
    assert_same_results(generated, "emulate")


@pytest.mark.skipif(PTXAS is None, reason="needs ptxas")
@fuzz_settings(8)
@given(kernels())
def test_generated_kernels_assemble(generated):
    describe(generated)
    for arch in ("sm_75", "sm_90"):
        compiled = compile(generated.source, arch=arch, config=generated.config, filename="generated.phobos")
        check(compiled.ptx, arch, name="generated.ptx").raise_for_errors()


@pytest.mark.gpu
@fuzz_settings(100)
@given(kernels())
def test_interpreter_and_gpu_agree(generated):
    assert_same_results(generated, "gpu")
