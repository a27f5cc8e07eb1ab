# The `python -m phobos` command: --version, targets shared with ptxcheck,
# -D values outside the autotune list, a reader that goes away early,
# `cache info` / `cache clear`, and what the commands refuse to read (devices,
# FIFOs, directories, huge files) and to write (into a missing directory, a
# directory, over the source).  (`check` is tested with the front end's
# errors, ptxcheck in test_ptxcheck.)
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from phobos import __version__, compiler, ptxcheck
from phobos.__main__ import main
from phobos.launch import cache

ROOT = Path(__file__).parent.parent
ADD = str(ROOT / "examples" / "add.phobos")
SGEMM = str(ROOT / "examples" / "sgemm.phobos")


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_version(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out == f"Phobos {__version__}\n"


@pytest.mark.parametrize("arch", list(compiler.TARGETS))
def test_every_target_ptxcheck_accepts_compiles(capsys, arch):
    assert ptxcheck._parse_archs(arch) == [arch]
    status, out, err = run_main(capsys, "compile", ADD, "--arch", arch)
    assert status == 0 and err == ""
    assert f"\n.target {arch}\n" in out


def test_an_unknown_target_is_refused_naming_the_targets(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["compile", ADD, "--arch", "sm_99"])
    assert exit.value.code == 2
    assert "invalid choice: 'sm_99'" in capsys.readouterr().err


def test_a_value_outside_the_autotune_list_is_compiled_as_given_with_a_warning(capsys):
    status, out, err = run_main(capsys, "compile", ADD, "-D", "BLOCK=300")
    assert status == 0
    assert err == ("phobos: warning: BLOCK=300 is not among the values @autotune lists for kernel 'add' "
                   "(1024, 2048, 4096); compiling with BLOCK=300 as given\n")
    assert "configuration BLOCK=300\n" in out
    status, out, err = run_main(capsys, "compile", ADD, "-D", "BLOCK=2048")
    assert status == 0 and err == "" and "configuration BLOCK=2048\n" in out


def test_an_unknown_autotune_parameter_is_an_error(capsys):
    status, out, err = run_main(capsys, "compile", ADD, "-D", "BLOK=256")
    assert status == 1 and out == ""
    assert "kernel 'add' has no autotune parameter 'BLOK' (it has: BLOCK)" in err


def test_a_reader_that_goes_away_ends_the_command_quietly():
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "phobos", "compile", SGEMM, "--dump-ast", "--dump-ir", "--dump-thread-ir",
               "--dump-after=cse"]  # well over a pipe's buffer
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment)
    first = child.stdout.readline()
    child.stdout.close()  # as `| head -1` does
    stderr = child.stderr.read().decode()
    assert child.wait() == 1
    assert first == b"Kernel @6:1 name='sgemm'\n"
    assert stderr == ""


def test_cache_info_and_clear(capsys, isolated_cache):
    store = cache.default_cache()
    store.store(cache.COMPILED, {"kernel": "add"}, {"ptx": "x" * 2000})
    store.store(cache.AUTOTUNE, {"kernel": "add"}, {"config": {}})
    status, out, _ = run_main(capsys, "cache", "info")
    lines = out.splitlines()
    assert status == 0 and lines[0] == f"cache: {isolated_cache}"
    assert lines[1].startswith("  kernels: 1 entry, ") and lines[1].endswith(" KiB")
    assert lines[2] == "  ptxas: 0 entries, 0 B" and lines[3].startswith("  autotune: 1 entry, ")
    assert lines[4] == "  tuned: 0 entries, 0 B" and lines[5].startswith("  total: 2 entries, ")
    status, out, _ = run_main(capsys, "cache", "clear")
    assert status == 0 and out == f"cache: {isolated_cache}: 2 entries deleted\n"
    assert store.info().entries == {"kernels": 0, "ptxas": 0, "autotune": 0, "tuned": 0}


def test_tma_gives_the_gemm_kernel_tensor_map_parameters_and_bulk_copies(capsys):
    gemm = str(ROOT / "examples" / "gemm_bf16.phobos")
    args = ["compile", gemm, "--kernel", "gemm_bf16", "--arch", "sm_90a", "-D", "TILE_K=64", "-D", "STAGES=3"]
    status, plain, err = run_main(capsys, *args)
    assert status == 0 and err == "" and "cp.async.bulk.tensor" not in plain and ".param .align 64" not in plain
    status, out, err = run_main(capsys, *args, "--tma")
    assert status == 0 and err == ""
    assert out.count(".param .align 64 .b8 ") == 3 and "cp.async.bulk.tensor.2d" in out  # A, B; C's stores


# --- what the commands read and write


def usage_error(capsys, *argv: str) -> str:
    """The message of a command that must end with a usage error (exit status 2), within seconds."""
    with pytest.raises(SystemExit) as exit:
        status = main(list(argv))
        raise SystemExit(status)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("phobos: error: ") and "Traceback" not in err
    return err.strip()[len("phobos: error: "):]


@pytest.mark.parametrize("command", ["check", "compile"])
def test_a_device_is_refused_before_anything_is_read(capsys, command):
    """`check /dev/zero` read until memory was gone."""
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    assert usage_error(capsys, command, "/dev/zero") == "cannot read /dev/zero: it is a character device, not a " \
                                                       "source file"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_without_a_writer_is_refused_without_waiting(capsys, tmp_path):
    fifo = tmp_path / "k.phobos"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "phobos", "check", str(fifo)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and done.stderr == f"phobos: error: cannot read {fifo}: it is a FIFO, not a source file\n"


def test_a_directory_and_a_huge_file_are_refused(capsys, tmp_path, monkeypatch):
    from phobos import __main__ as command
    assert usage_error(capsys, "check", str(tmp_path)) == f"cannot read {tmp_path}: it is a directory, not a source file"
    big = tmp_path / "big.phobos"
    big.write_text("//" + "x" * 100)
    monkeypatch.setattr(command, "MAX_SOURCE_BYTES", 64)
    assert usage_error(capsys, "check", str(big)) == f"{big} is larger than 0 MiB: not a Phobos source"


def test_output_into_a_missing_directory_or_a_directory_is_a_clear_error(capsys, tmp_path):
    missing = tmp_path / "missing" / "x.ptx"
    assert usage_error(capsys, "compile", ADD, "-o", str(missing)) == \
        f"-o {missing}: the directory {missing.parent} does not exist"
    assert usage_error(capsys, "compile", ADD, "-o", str(tmp_path)) == \
        f"-o {tmp_path} is a directory; name the file to write"


def test_output_over_the_source_is_refused_and_the_source_kept(capsys, tmp_path):
    source = tmp_path / "add.phobos"
    source.write_text(Path(ADD).read_text())
    alias = tmp_path / "." / "add.phobos"
    assert usage_error(capsys, "compile", str(source), "-o", str(alias)) == \
        f"-o {alias} is the source file {source}; it would be overwritten with PTX"
    assert source.read_text() == Path(ADD).read_text()
    status, _, _ = run_main(capsys, "compile", str(source), "-o", str(tmp_path / "add.ptx"))
    assert status == 0 and (tmp_path / "add.ptx").read_text().startswith("//\n// Generated by Phobos")


# ---------------------------------------------------------------------------------------------------- emulate
HANDWRITTEN_ADD = str(ROOT / "handwritten_ptx" / "add.ptx")
NVCC_KERNELS = str(ROOT / "tests" / "data" / "emulator" / "nvcc_kernels.ptx")


def test_emulate_runs_ptx_and_writes_the_arrays_the_kernel_changed(capsys, tmp_path):
    a, b = np.arange(1000, dtype=np.float32), np.ones(1000, np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    out = tmp_path / "out"
    out.mkdir()
    status, _, err = run_main(capsys, "emulate", HANDWRITTEN_ADD, "--grid", "4", "--block", "256",
                              "--arg", str(tmp_path / "a.npy"), "--arg", f"b_ptr={tmp_path / 'b.npy'}",
                              "--arg", "c_ptr=zeros:f32:1000", "--arg", "n=1000", "--out", str(out))
    assert status == 0, err
    np.testing.assert_array_equal(np.load(out / "c_ptr.npy"), a + b)
    assert sorted(p.name for p in out.iterdir()) == ["c_ptr.npy"]  # the inputs did not change
    assert f"wrote c_ptr to {out / 'c_ptr.npy'}" in err
    np.save(tmp_path / "c.npy", np.zeros(1000, np.float32))  # without --out: over the file given
    status, _, err = run_main(capsys, "emulate", HANDWRITTEN_ADD, "--grid", "4", "--block", "256",
                              "--arg", str(tmp_path / "a.npy"), "--arg", str(tmp_path / "a.npy"),
                              "--arg", str(tmp_path / "c.npy"), "--arg", "0x3e8")
    assert status == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), 2 * a)


def test_emulate_faults_quote_the_source_line_the_ptx_names(capsys, tmp_path):
    """nvcc's PTX names nvcc_kernels.cu (relative): found beside the PTX file, quoted under the fault."""
    np.save(tmp_path / "a.npy", np.ones(10))
    status, _, err = run_main(capsys, "emulate", NVCC_KERNELS, "--kernel", "misc", "--grid", "1", "--block", "64",
                              "--arg", str(tmp_path / "a.npy"), "--arg", "zeros:f64:64", "--arg", "zeros:s64:64",
                              "--arg", "zeros:s16:64", "--arg", "zeros:f16:64", "--arg", "64", "--out", str(tmp_path))
    assert status == 1
    assert err.startswith("nvcc_kernels.cu:72:") and "out-of-bounds global load" in err
    assert "    double v = a[i];\n" in err


@pytest.mark.parametrize("args, message", [
    (["--arg", "c_ptrr=zeros:f32:10"], "add: the kernel has no parameter 'c_ptrr' (its parameters: a_ptr, b_ptr, "
                                       "c_ptr, n)"),
    (["--arg", "zeros:f32:4"], "add: no values for parameters b_ptr, c_ptr, n (--arg NAME=VALUE)"),
    (["--arg", "zeros:f32:4", "--arg", "zeros:f32:4", "--arg", "zeros:f32:4", "--arg", "n=1.5"],
     "add: n=1.5: .u32 takes an integer, a FILE.npy or zeros:DTYPE:SHAPE"),
    (["--arg", "zeros:f32:4", "--arg", "zeros:f99:4", "--arg", "zeros:f32:4", "--arg", "1"],
     "add: b_ptr=zeros:f99:4: expected zeros:DTYPE:SHAPE with a numpy or PTX element type and sizes like 64x64"),
    (["--arg", "missing.npy", "--arg", "zeros:f32:4", "--arg", "zeros:f32:4", "--arg", "1"],
     "add: a_ptr=missing.npy: cannot read it: No such file or directory"),
    (["--arg", "n=1", "--arg", "n=2"], "add: parameter n is given twice"),
    (["--arg", "1", "--arg", "2", "--arg", "3", "--arg", "4", "--arg", "5"],
     "add: 5 arguments for 4 parameters (a_ptr, b_ptr, c_ptr, n)"),
    (["--out", "/nonexistent/dir"], "--out /nonexistent/dir is not a directory"),
])
def test_emulate_usage_errors_name_the_parameter(capsys, args, message):
    assert usage_error(capsys, "emulate", HANDWRITTEN_ADD, "--grid", "1", "--block", "32", *args) == message


def test_emulate_asks_which_kernel(capsys):
    assert usage_error(capsys, "emulate", NVCC_KERNELS, "--grid", "1", "--block", "32").startswith(
        f"{NVCC_KERNELS} has 8 kernels; name one with --kernel (sgemm, reduce, ")
    assert usage_error(capsys, "emulate", NVCC_KERNELS, "--kernel", "gemm", "--grid", "1", "--block", "32") \
        .startswith(f"{NVCC_KERNELS} has no kernel 'gemm' (it has sgemm, reduce, ")
