# Phobos: a tiny tile kernel language that compiles straight to PTX.
#
# The public surface is gathered here; each name lives in the module of its
# stage (see docs/architecture.md for the pipeline).  Importing phobos loads
# only this file, the errors, the version and the log set-up: the compiler and the launcher are imported
# the first time one of their names is used, and PyCUDA only when a kernel
# runs on the GPU.  Every error class a user can meet is exported here
# (`except phobos.LaunchError:`); README.md, "Errors", lists them.  The logger "phobos" is set up here (phobos.log), so that
# every notice finds it ready.
#
# `__version__` is written in phobos/version.py.
import importlib

from . import log
from .errors import (DeviceAssertError, ErrorList, ExecutionError, InternalError, LaunchError, LexError, ParseError,
                     PhobosError, PtxasError, PtxasTimeout, RaceError, ResourceError, SemanticError, ToolchainError,
                     UnsupportedError)
from .version import __version__

log.configure()

#: Public names and the modules that define them, imported on first use.
_LAZY_EXPORTS = {
    "jit": "launch.launcher",
    "load": "launch.launcher",
    "kernel": "launch.launcher",
    "torch_op": "launch.torch_ops",
    "compile": "compiler",
    "compile_to_ptx": "compiler",
}

#: The error classes, from the base of them all to the most specific (README.md, "Errors").
ERRORS = ["PhobosError", "LexError", "ParseError", "SemanticError", "UnsupportedError", "ResourceError",
          "LaunchError", "ExecutionError", "RaceError", "DeviceAssertError", "ToolchainError", "PtxasTimeout",
          "PtxasError", "ErrorList", "InternalError"]

__all__ = [*ERRORS, "__version__", *_LAZY_EXPORTS]


def __getattr__(name: str):
    if name in _LAZY_EXPORTS:
        value = getattr(importlib.import_module(f".{_LAZY_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'phobos' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_EXPORTS))
