# Finding ptxas: the lookup order, and the errors users see when it fails.
from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from phobos import toolchain
from phobos.errors import PtxasTimeout, ToolchainError

pytestmark = pytest.mark.usefixtures("fresh_ptxas_lookup")


def make_executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_real_ptxas_is_found_and_runs(add_ptx_path):
    returncode, _, stderr = toolchain.run_ptxas(add_ptx_path.read_text(), "sm_90", source_name="add.ptx")
    assert returncode == 0
    assert "Compiling entry function 'add' for 'sm_90'" in stderr


def test_phobos_ptxas_comes_first(no_ptxas, monkeypatch, tmp_path):
    on_path = make_executable(tmp_path / "path" / "ptxas")
    chosen = make_executable(tmp_path / "chosen" / "my-ptxas")
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv("PHOBOS_PTXAS", str(chosen))
    assert toolchain.find_ptxas() == str(chosen)


def test_bad_phobos_ptxas_is_an_error_not_a_fallback(no_ptxas, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(make_executable(tmp_path / "path" / "ptxas").parent))
    monkeypatch.setenv("PHOBOS_PTXAS", str(tmp_path / "missing"))
    with pytest.raises(ToolchainError, match=r"PHOBOS_PTXAS=.*missing is not an executable file"):
        toolchain.find_ptxas()


def test_path_comes_before_cuda_home(no_ptxas, monkeypatch, tmp_path):
    on_path = make_executable(tmp_path / "path" / "ptxas")
    make_executable(tmp_path / "cuda" / "bin" / "ptxas")
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert toolchain.find_ptxas() == str(on_path)


def test_cuda_home_comes_before_the_default_toolkit(no_ptxas, monkeypatch, tmp_path):
    in_cuda_home = make_executable(tmp_path / "cuda" / "bin" / "ptxas")
    default = make_executable(tmp_path / "default" / "ptxas")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.setattr(toolchain, "DEFAULT_CUDA_BIN_DIRS", (default.parent,))
    assert toolchain.find_ptxas() == str(in_cuda_home)


def test_default_toolkit_comes_before_the_wheel(no_ptxas, monkeypatch, tmp_path):
    default = make_executable(tmp_path / "default" / "ptxas")
    wheel = make_executable(tmp_path / "wheel" / "ptxas")
    monkeypatch.setattr(toolchain, "DEFAULT_CUDA_BIN_DIRS", (default.parent,))
    monkeypatch.setattr(toolchain, "_wheel_ptxas_candidates", lambda: [wheel])
    assert toolchain.find_ptxas() == str(default)


def test_wheel_is_found_through_the_nvidia_package(monkeypatch, tmp_path):
    wheel_ptxas = make_executable(tmp_path / "site" / "nvidia" / "cu13" / "bin" / "ptxas")
    monkeypatch.delenv("PHOBOS_PTXAS", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(toolchain, "DEFAULT_CUDA_BIN_DIRS", ())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert toolchain.find_ptxas() == str(wheel_ptxas)


def test_no_ptxas_anywhere_says_how_to_get_one(no_ptxas):
    with pytest.raises(ToolchainError) as caught:
        toolchain.find_ptxas()
    message = str(caught.value)
    assert "ptxas not found" in message
    assert "pip install nvidia-cuda-nvcc==13.0.*" in message
    assert "PHOBOS_PTXAS" in message and "CUDA_HOME" in message
    assert "\n" not in message


def test_lookup_follows_changes_to_the_environment(no_ptxas, monkeypatch, tmp_path):
    first = make_executable(tmp_path / "first" / "ptxas")
    second = make_executable(tmp_path / "second" / "ptxas")
    monkeypatch.setenv("PATH", str(first.parent))
    assert toolchain.find_ptxas() == str(first)
    monkeypatch.setenv("PATH", str(second.parent))
    assert toolchain.find_ptxas() == str(second)


def test_unknown_target_is_refused_before_running_ptxas(no_ptxas):
    with pytest.raises(ToolchainError, match=r"unknown target 'sm_70' \(supported: sm_75, .*sm_90a\)"):
        toolchain.run_ptxas("", "sm_70")


def test_run_ptxas_names_the_callers_file_in_diagnostics():
    returncode, _, stderr = toolchain.run_ptxas(".version 7.8\n.target sm_75\nbogus;\n", "sm_75", source_name="x.ptx")
    assert returncode != 0
    assert "ptxas x.ptx, line 3;" in stderr


def test_a_ptxas_that_runs_too_long_is_stopped(monkeypatch, tmp_path):
    slow = tmp_path / "slow-ptxas"
    slow.write_text("#!/bin/sh\nexec sleep 60\n")
    slow.chmod(slow.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PHOBOS_PTXAS", str(slow))
    started = time.monotonic()
    with pytest.raises(PtxasTimeout) as error:
        toolchain.run_ptxas("// nothing", "sm_90", source_name="k.ptx", timeout=0.5)
    assert time.monotonic() - started < 30
    assert error.value.message == ("ptxas took longer than 0.5 s on k.ptx; not assembled "
                                   "(PHOBOS_PTXAS_TIMEOUT sets the limit, in seconds)")
    assert isinstance(error.value, ToolchainError)


def test_the_time_limit_comes_from_the_environment(monkeypatch):
    assert toolchain.ptxas_timeout() == toolchain.DEFAULT_PTXAS_TIMEOUT == 60
    monkeypatch.setenv("PHOBOS_PTXAS_TIMEOUT", "2.5")
    assert toolchain.ptxas_timeout() == 2.5
    for bad in ("0", "-1", "soon", "inf", "nan"):
        monkeypatch.setenv("PHOBOS_PTXAS_TIMEOUT", bad)
        with pytest.raises(ToolchainError, match=f"PHOBOS_PTXAS_TIMEOUT={bad} is not a positive number of seconds"):
            toolchain.ptxas_timeout()
