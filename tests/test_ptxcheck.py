# ptxcheck: the Python API's reports and the command's output and exit status.
from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from phobos import compiler, ptxcheck
from phobos.errors import PtxasError, ToolchainError

HEADER = ".version 7.8\n.target sm_75\n.address_size 64\n"

# Line 7 has an unknown instruction; line 8 uses an undeclared register.
BAD_INSTRUCTION_PTX = HEADER + """\
.visible .entry broken(.param .u32 n)
{
    .reg .b32 %r<2>;
    bogus.u32 %r0, 1;
    ld.param.u32 %r9, [n];
    ret;
}
"""

# Line 4 is not PTX at all: ptxas stops parsing there.
SYNTAX_ERROR_PTX = HEADER + "this is not ptx\n"

SHARED_MEMORY_PTX = HEADER + """\
.visible .entry uses_shared(.param .u64 out)
{
    .shared .align 4 .b8 buffer[4096];
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    mov.u32 %r0, %tid.x;
    st.shared.u32 [buffer], %r0;
    bar.sync 0;
    ld.shared.u32 %r1, [buffer+4];
    ld.param.u64 %rd0, [out];
    st.global.u32 [%rd0], %r1;
    ret;
}
"""

# .maxnreg below what the hardware allows: ptxas warns and raises it.
WARNING_PTX = HEADER + """\
.visible .entry tight(.param .u32 n)
.maxnreg 4
{
    ret;
}
"""


def spilling_ptx(values: int = 80) -> str:
    """A kernel that keeps `values` floats live under .maxnreg 24, so it must spill."""
    loads = "\n".join(f"    ld.volatile.global.f32 %f{i}, [%rd0+{4 * i}];" for i in range(values))
    stores = "\n".join(
        f"    st.volatile.global.f32 [%rd0+{4 * (values + i)}], %f{values - 1 - i};" for i in range(values)
    )
    return HEADER + (
        ".visible .entry spills(.param .u64 p)\n.maxnreg 24\n{\n"
        f"    .reg .f32 %f<{values}>;\n    .reg .b64 %rd<1>;\n    ld.param.u64 %rd0, [p];\n"
        f"{loads}\n{stores}\n    ret;\n}}\n"
    )


# --- the Python API


@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_add_ptx_assembles_with_no_spills(add_ptx_path, arch):
    report = ptxcheck.check(add_ptx_path.read_text(), arch=arch, name="add.ptx")
    assert report.ok, report.raw
    assert (report.arch, report.name, report.errors) == (arch, "add.ptx", [])
    assert [kernel.name for kernel in report.kernels] == ["add"]
    add = report.kernel("add")
    assert add.registers > 0
    assert (add.spill_stores, add.spill_loads, add.shared_bytes, add.stack_bytes) == (0, 0, 0, 0)
    assert "Compiling entry function 'add'" in report.raw


def test_every_supported_target_accepts_add_ptx(add_ptx_path):
    text = add_ptx_path.read_text()
    rejected = [arch for arch in compiler.TARGETS if not ptxcheck.check(text, arch).ok]
    assert rejected == []


def test_spills_and_stack_are_reported():
    kernel = ptxcheck.check(spilling_ptx(), "sm_90").kernel("spills")
    assert kernel.registers == 24
    assert kernel.spill_stores > 0 and kernel.spill_loads > 0
    assert kernel.stack_bytes >= kernel.spill_stores


def test_shared_memory_is_reported():
    report = ptxcheck.check(SHARED_MEMORY_PTX, "sm_80")
    assert report.kernel("uses_shared").shared_bytes == 4096


def test_errors_carry_file_and_line():
    report = ptxcheck.check(BAD_INSTRUCTION_PTX, "sm_90", name="broken.ptx")
    assert not report.ok
    assert report.kernels == []
    assert [(e.file, e.line) for e in report.errors][:2] == [("broken.ptx", 7), ("broken.ptx", 8)]
    assert "bogus" in report.errors[0].message
    assert str(report.errors[0]).startswith("broken.ptx:7: error: ")
    assert not any("aborted" in e.message for e in report.errors)


def test_a_syntax_error_is_located():
    report = ptxcheck.check(SYNTAX_ERROR_PTX, "sm_75", name="syntax.ptx")
    assert not report.ok
    assert report.errors[0].line == 4


def test_warnings_are_kept_apart_from_errors():
    report = ptxcheck.check(WARNING_PTX, "sm_90")
    assert report.ok and report.errors == []
    assert len(report.warnings) == 1
    assert report.warnings[0].severity == "warning"
    assert "tight" in report.warnings[0].message


def test_performance_advisories_are_kept_with_their_kernel():
    """ptxas's "Potential Performance Loss" lines (ptxas 13.0's words, which come before the kernel's own)
    belong to the kernel they name and show in its summary; they are not warnings."""
    output = "\n".join([
        "ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
        "insufficient register resources for the wgmma pipeline in the function 'dkdv'",
        "ptxas info    : 0 bytes gmem",
        "ptxas info    : Compiling entry function 'dkdv' for 'sm_90a'",
        "ptxas info    : Function properties for dkdv",
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
        "ptxas info    : Used 254 registers, used 1 barriers",
        "ptxas info    : Compiling entry function 'other' for 'sm_90a'"])
    kernels, errors, warnings = ptxcheck._parse_ptxas_output(output, "k.ptx")
    assert errors == [] and warnings == []
    assert [(k.name, k.advisories) for k in kernels] == [
        ("dkdv", ["C7511: wgmma.mma_async instructions are serialized due to insufficient register resources "
                  "for the wgmma pipeline"]), ("other", [])]
    assert kernels[0].summary().endswith("B stack; C7511: wgmma.mma_async instructions are serialized due to "
                                         "insufficient register resources for the wgmma pipeline")


def test_raise_for_errors():
    ptxcheck.check(WARNING_PTX, "sm_90").raise_for_errors()  # no error: returns
    with pytest.raises(PtxasError, match=r"ptxas rejected broken.ptx for sm_90:\n  broken.ptx:7: error: "):
        ptxcheck.check(BAD_INSTRUCTION_PTX, "sm_90", name="broken.ptx").raise_for_errors()


def test_unknown_target_raises():
    with pytest.raises(ToolchainError, match="unknown target 'sm_61'"):
        ptxcheck.check(WARNING_PTX, "sm_61")


def test_missing_kernel_lookup_names_the_kernels(add_ptx_path):
    report = ptxcheck.check(add_ptx_path.read_text(), "sm_90", name="add.ptx")
    with pytest.raises(KeyError, match=r"no kernel 'mul' in add.ptx \(kernels: add\)"):
        report.kernel("mul")


# --- the command


@pytest.fixture
def ptx_file(tmp_path):
    def write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    status = ptxcheck.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_cli_good_file_prints_one_line_per_kernel_and_target(capsys, add_ptx_path):
    status, out, err = run_main(capsys, str(add_ptx_path))
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) == 2
    for line, arch in zip(lines, ["sm_75", "sm_90"]):
        assert re.fullmatch(
            rf"{re.escape(str(add_ptx_path))} \[{arch}\] add: \d+ registers, 0 B spill stores, "
            r"0 B spill loads, 0 B shared, 0 B stack",
            line,
        )


def test_cli_rejected_file_prints_file_and_line_and_exits_1(capsys, ptx_file):
    path = ptx_file("broken.ptx", BAD_INSTRUCTION_PTX)
    status, out, _ = run_main(capsys, path, "--arch", "sm_90")
    assert status == 1
    assert f"{path} [sm_90]: rejected by ptxas" in out
    assert f"{path}:7: error: " in out


def test_cli_syntax_error_exits_1(capsys, ptx_file):
    path = ptx_file("syntax.ptx", SYNTAX_ERROR_PTX)
    status, out, _ = run_main(capsys, path)
    assert status == 1
    assert f"{path}:4: error: " in out


def test_cli_one_bad_file_fails_the_run_but_all_are_reported(capsys, add_ptx_path, ptx_file):
    status, out, _ = run_main(capsys, str(add_ptx_path), ptx_file("broken.ptx", BAD_INSTRUCTION_PTX))
    assert status == 1
    assert out.count(" add: ") == 2
    assert out.count("rejected by ptxas") == 2


def test_cli_warnings_do_not_fail(capsys, ptx_file):
    path = ptx_file("tight.ptx", WARNING_PTX)
    status, out, _ = run_main(capsys, path, "--arch", "sm_90")
    assert status == 0
    assert f"{path}: warning: " in out


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda add, tmp: [str(tmp / "missing.ptx")], "missing.ptx: no such file"),
        (lambda add, tmp: [str(tmp)], "not a file"),
        (lambda add, tmp: [str(add), "--arch", "sm_75,sm_99"], "unknown target 'sm_99'"),
        (lambda add, tmp: [str(add.parent.parent / "setup.cfg")], "unsupported file type '.cfg'"),
    ],
    ids=["missing-file", "directory", "unknown-target", "unsupported-type"],
)
def test_cli_input_problems_exit_2_with_one_line(capsys, add_ptx_path, tmp_path, make_args, message):
    status, out, err = run_main(capsys, *make_args(add_ptx_path, tmp_path))
    assert status == 2
    assert out == ""
    assert err.startswith("ptxcheck: ") and message in err
    assert err.count("\n") == 1


def test_cli_without_ptxas_says_how_to_get_it(capsys, add_ptx_path, no_ptxas):
    status, _, err = run_main(capsys, str(add_ptx_path))
    assert status == 2
    assert "pip install nvidia-cuda-nvcc==13.0.*" in err
    assert err.count("\n") == 1


def test_cli_json_output(capsys, add_ptx_path, ptx_file):
    status, out, _ = run_main(
        capsys, str(add_ptx_path), ptx_file("broken.ptx", BAD_INSTRUCTION_PTX), "--json", "--arch", "sm_80"
    )
    assert status == 1
    good, bad = json.loads(out)
    assert (good["arch"], good["ok"], good["kernels"][0]["name"]) == ("sm_80", True, "add")
    assert good["kernels"][0]["registers"] > 0
    assert bad["ok"] is False
    assert bad["errors"][0]["line"] == 7


def test_module_runs_as_a_command_without_traceback(add_ptx_path, tmp_path):
    command = [sys.executable, "-m", "phobos.ptxcheck"]
    good = subprocess.run([*command, str(add_ptx_path)], capture_output=True, text=True)
    assert good.returncode == 0, good.stderr
    assert "[sm_90] add:" in good.stdout
    missing = subprocess.run([*command, str(tmp_path / "nope.ptx")], capture_output=True, text=True)
    assert missing.returncode == 2
    assert "Traceback" not in missing.stderr


EXAMPLES = Path(__file__).parent.parent / "examples"


def test_phobos_sources_report_the_dynamic_shared_memory_beside_ptxas_static_figure(capsys, tmp_path):
    source = re.sub(r"@autotune\(.*\)", "@autotune(TILE_M in [32, 64], TILE_N in [64], TILE_K in [16])",
                    (EXAMPLES / "sgemm.phobos").read_text())
    path = tmp_path / "sgemm.phobos"
    path.write_text(source)
    expected = {k.config_text: k.shared_bytes for k in compiler.compile_all(source, arch="sm_90", filename=str(path))}
    assert len(expected) == 2 and all(shared > 0 for shared in expected.values())
    status, out, _ = run_main(capsys, str(path), "--arch", "sm_90", "--json")
    assert status == 0
    reports = {report["name"]: report["kernels"][0] for report in json.loads(out)}
    assert {name.split(" [sgemm: ")[1][:-1] for name in reports} == set(expected)
    for config, shared in expected.items():
        kernel = reports[f"{path} [sgemm: {config}]"]
        assert kernel["shared_bytes"] == 0 and kernel["dynamic_shared_bytes"] == shared
    status, out, _ = run_main(capsys, str(path), "--arch", "sm_90")
    assert f"0 B shared + {expected['TILE_M=32, TILE_N=64, TILE_K=16']} B dynamic shared, 0 B stack" in out


def test_the_summary_shows_dynamic_shared_memory_when_it_is_known():
    report = ptxcheck.KernelReport("k", registers=30, shared_bytes=16, dynamic_shared_bytes=4096)
    assert report.summary() == ("k: 30 registers, 0 B spill stores, 0 B spill loads, 16 B shared "
                                "+ 4096 B dynamic shared, 0 B stack")
    assert "16 B shared, 0 B stack" in ptxcheck.KernelReport("k", shared_bytes=16).summary()


def test_checking_many_configurations_logs_progress(capsys, caplog, monkeypatch, tmp_path):
    from phobos import log
    monkeypatch.setattr(log, "PROGRESS_DELAY", 0.0)
    caplog.set_level(logging.INFO, logger="phobos")
    path = tmp_path / "add.phobos"
    path.write_text((EXAMPLES / "add.phobos").read_text())
    status, out, _ = run_main(capsys, str(path), "--arch", "sm_75")
    assert status == 0 and out.count(" add: ") == 3
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("phobos")]
    assert re.fullmatch(rf"compiling {re.escape(str(path))} for sm_75: 1/3 configurations, \d+ s so far, about \d+ s "
                        rf"left", lines[0])
    assert re.fullmatch(rf"compiling {re.escape(str(path))} for sm_75: 3 configurations compiled \(.*\)", lines[1])
    assert re.fullmatch(r"assembling 3 PTX texts with ptxas: 1/3 texts, \d+ s so far, about \d+ s left", lines[2])
    assert re.fullmatch(r"assembling 3 PTX texts with ptxas: 3 of 3 assembled \(.*\)", lines[-1])


def test_version(capsys):
    from phobos import __version__
    with pytest.raises(SystemExit) as exit:
        ptxcheck.main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out == f"Phobos {__version__}\n"


def test_sm_90a_is_a_target_of_ptxcheck_and_of_the_compiler(capsys, tmp_path):
    path = tmp_path / "add.phobos"
    path.write_text((EXAMPLES / "add.phobos").read_text())
    status, out, _ = run_main(capsys, str(path), "--arch", "sm_90a")
    assert status == 0 and out.count("[sm_90a] add:") == 3


def test_cli_checks_a_ptx_file_for_its_own_target_by_default_and_says_so(capsys):
    """The tensor-core files need sm_80 and sm_90a: ptxas refused them for the fixed default targets."""
    mma, wgmma = (str(Path(__file__).parent.parent / "handwritten_ptx" / name)
                  for name in ("gemm_bf16_mma.ptx", "gemm_bf16_wgmma.ptx"))
    status, out, err = run_main(capsys, mma, wgmma)
    assert status == 0, out
    assert [line.split(" ")[1] for line in out.splitlines()] == ["[sm_80]", "[sm_90]", "[sm_90a]"]
    assert err.splitlines() == [
        f"ptxcheck: {mma} has .target sm_80: checking it for sm_80, sm_90 (--arch chooses the targets)",
        f"ptxcheck: {wgmma} has .target sm_90a: checking it for sm_90a (--arch chooses the targets)"]


def test_cli_says_which_arch_takes_a_refused_target(capsys):
    wgmma = str(Path(__file__).parent.parent / "handwritten_ptx" / "gemm_bf16_wgmma.ptx")
    status, out, _ = run_main(capsys, wgmma, "--arch", "sm_90")
    assert status == 1
    assert out.splitlines()[-1] == f"{wgmma}: note: its .target is sm_90a, which sm_90 cannot take: --arch sm_90a would"


def test_targets_for_a_declared_target():
    assert ptxcheck.targets_for("sm_75") == ["sm_75", "sm_90"]
    assert ptxcheck.targets_for("sm_86") == ["sm_86", "sm_90"]
    assert ptxcheck.targets_for("sm_90a") == ["sm_90a"]
    assert ptxcheck.targets_for(None) == ["sm_75", "sm_90"]
    assert ptxcheck.declared_target("//\n.version 8.0\n.target sm_80 // comment\n") == "sm_80"
