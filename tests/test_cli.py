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
    assert lines[4].startswith("  total: 2 entries, ")
    status, out, _ = run_main(capsys, "cache", "clear")
    assert status == 0 and out == f"cache: {isolated_cache}: 2 entries deleted\n"
    assert store.info().entries == {"kernels": 0, "ptxas": 0, "autotune": 0}


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
