# Finding and running ptxas, NVIDIA's PTX assembler.
#
# Phobos emits PTX text itself; ptxas is the one outside tool it needs, to
# check that text and to read off what a kernel costs (registers, spills,
# shared memory).  Everything in Phobos that runs ptxas goes through
# `find_ptxas` and `run_ptxas` here, so that the lookup order, the error a user
# sees when ptxas is missing and the list of targets live in one place.
#
# Lookup order: $PHOBOS_PTXAS, then `ptxas` on $PATH, then $CUDA_HOME/bin, then
# /usr/local/cuda/bin, then the `nvidia-cuda-nvcc` wheel (installed by the
# `test` extra), which puts ptxas under <site-packages>/nvidia/cu13/bin.
#
# ptxas's time grows with the square of a kernel's length, so a run can be
# given a time limit; the autotuner uses `ptxas_timeout()` ($PHOBOS_PTXAS_TIMEOUT
# seconds, default 60) and a run that takes longer is a PtxasTimeout.
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .errors import PtxasTimeout, ToolchainError

#: Where a CUDA toolkit installed by NVIDIA's installer puts ptxas.
DEFAULT_CUDA_BIN_DIRS = (Path("/usr/local/cuda/bin"),)

#: Where the nvidia-cuda-nvcc wheel puts ptxas, relative to the `nvidia` package.
WHEEL_PTXAS = Path("cu13") / "bin" / "ptxas"

#: Seconds the autotuner lets ptxas run on one configuration, unless PHOBOS_PTXAS_TIMEOUT says otherwise.
DEFAULT_PTXAS_TIMEOUT = 60.0

HOW_TO_GET_PTXAS = (
    "install it with `pip install nvidia-cuda-nvcc==13.0.*` (or a CUDA toolkit), "
    "or point PHOBOS_PTXAS at a ptxas executable or CUDA_HOME at a CUDA toolkit"
)


def find_ptxas() -> str:
    """Return the path of the ptxas executable to use.

    The answer is cached for the current values of PHOBOS_PTXAS, PATH and
    CUDA_HOME.  Raises ToolchainError, saying how to get ptxas, when none is
    found or when PHOBOS_PTXAS names something that is not an executable file.
    """
    return _locate_ptxas(
        os.environ.get("PHOBOS_PTXAS"),
        os.environ.get("PATH", ""),
        os.environ.get("CUDA_HOME"),
    )


@functools.lru_cache(maxsize=None)
def _locate_ptxas(explicit: str | None, search_path: str, cuda_home: str | None) -> str:
    if explicit:
        if _is_executable(Path(explicit)):
            return explicit
        raise ToolchainError(f"PHOBOS_PTXAS={explicit} is not an executable file; {HOW_TO_GET_PTXAS}")
    on_path = shutil.which("ptxas", path=search_path)
    if on_path:
        return on_path
    candidates = [Path(cuda_home) / "bin" / "ptxas"] if cuda_home else []
    candidates += [directory / "ptxas" for directory in DEFAULT_CUDA_BIN_DIRS]
    candidates += _wheel_ptxas_candidates()
    for candidate in candidates:
        if _is_executable(candidate):
            return str(candidate)
    raise ToolchainError(f"ptxas not found; {HOW_TO_GET_PTXAS}")


def _wheel_ptxas_candidates() -> list[Path]:
    """The places the nvidia-cuda-nvcc wheel may have put ptxas."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(location) / WHEEL_PTXAS for location in spec.submodule_search_locations]


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def check_arch(arch: str) -> str:
    """Return `arch` if Phobos generates code for it (phobos.compiler.TARGETS), else raise ToolchainError."""
    from .compiler import TARGETS  # imported here: checking a .ptx file needs nothing else of the compiler
    if arch not in TARGETS:
        raise ToolchainError(f"unknown target '{arch}' (supported: {', '.join(TARGETS)})")
    return arch


def ptxas_timeout() -> float:
    """Seconds ptxas may take on one kernel while tuning: $PHOBOS_PTXAS_TIMEOUT, else 60."""
    text = os.environ.get("PHOBOS_PTXAS_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_PTXAS_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ToolchainError(f"PHOBOS_PTXAS_TIMEOUT={text} is not a positive number of seconds")
    return seconds


def run_ptxas(
    ptx_text: str, arch: str, extra_args: Sequence[str] = (), source_name: str = "input.ptx",
    timeout: float | None = None, cubin_path: Path | None = None,
) -> tuple[int, str, str]:
    """Assemble `ptx_text` for `arch` with `ptxas -v`; return (returncode, stdout, stderr).

    The text goes through a temporary file and the cubin is thrown away, unless
    `cubin_path` says where to keep it.  In the output, the temporary file is
    called `source_name`, so that diagnostics such as
    `ptxas add.ptx, line 12; error : ...` name the user's file.  With a
    `timeout` (seconds), a ptxas still running then is killed and the run is a
    PtxasTimeout.
    """
    check_arch(arch)
    ptxas = find_ptxas()
    with tempfile.TemporaryDirectory(prefix="phobos-ptxas-") as tmp:
        source = Path(tmp) / "input.ptx"
        source.write_text(ptx_text)
        output = cubin_path or Path(tmp) / "out.cubin"
        command = [ptxas, f"-arch={arch}", "-v", *extra_args, "-o", str(output), str(source)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise PtxasTimeout(f"ptxas took longer than {timeout:g} s on {source_name}; not assembled "
                               f"(PHOBOS_PTXAS_TIMEOUT sets the limit, in seconds)") from None
        except OSError as error:
            raise ToolchainError(f"cannot run ptxas at {ptxas}: {error.strerror}") from error
    stdout = done.stdout.replace(str(source), source_name)
    stderr = done.stderr.replace(str(source), source_name)
    return done.returncode, stdout, stderr
