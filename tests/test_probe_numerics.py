# tools/probe_numerics.py, the probe of every operation on the special values:
# its kernels build and run in the CPU modes, which agree, and its facts name
# the bits each mode gives.  The whole probe takes about 10 s here; on the GPU
# machine it runs with the GPU as the third mode.
import importlib.util
import sys
from pathlib import Path

import numpy as np

PROBE = Path(__file__).resolve().parent.parent / "tools" / "probe_numerics.py"


def load():
    spec = importlib.util.spec_from_file_location("probe_numerics", PROBE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_cpu_modes_agree_on_the_casts_from_f64_and_the_facts_show_their_bits(capsys, tmp_path):
    probe = load()
    assert probe.main(["--no-gpu", "--only", "(f64)", "--json", str(tmp_path / "probe.json")]) == 0
    out = capsys.readouterr().out
    assert "u32(f64)" in out and "i64(f64)" in out
    assert "f32(f64) (0x7ffc000020000000): interpret 0x7fe00001, emulate 0x7fe00001" in out


def test_every_probe_kernel_is_a_valid_program():
    probe = load()
    for group in probe.probe_groups():
        program = probe.program(group)
        assert len(program.outputs) == len(group.cases)
        assert all(len(a) % probe.BLOCK == 0 for a in program.inputs.values())


def test_the_specials_hold_every_kind_of_nan():
    probe = load()
    for dtype, uint, quiet in (("f32", np.uint32, 1 << 22), ("f64", np.uint64, 1 << 51)):
        bits = probe.specials(dtype).view(uint)
        nan = np.isnan(probe.specials(dtype))
        sign = bits >> uint(8 * bits.itemsize - 1)
        assert {(bool(s), bool(b & uint(quiet))) for s, b in zip(sign[nan], bits[nan])} == {
            (False, True), (True, True), (False, False), (True, False)}  # quiet and signaling, both signs
