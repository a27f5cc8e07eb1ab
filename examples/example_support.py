# What the example scripts share: choosing where to run, timing a call, and
# reporting errors the way a user of Phobos sees them.
from __future__ import annotations

import argparse
import contextlib
import sys

import numpy as np

import phobos
from phobos.launch.launcher import benchmark
from phobos.run.backends import default_mode

MODES = ["gpu", "interpret", "emulate"]


def arguments(description: str, **size_options) -> argparse.Namespace:
    """--mode (default: what Phobos picks for mode=None), --check-only and the script's own size options."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--mode", choices=MODES,
                        help="default: PHOBOS_MODE if set, else the GPU if there is one, else the interpreter")
    parser.add_argument("--check-only", action="store_true",
                        help="check the result and do not time the kernel (for runs under compute-sanitizer)")
    for name, options in size_options.items():
        parser.add_argument(f"--{name}", **options)
    return parser.parse_args()


def pick_mode(requested: str | None) -> str:
    """The requested mode, else the one Phobos picks for mode=None (which says why when there is no GPU)."""
    return requested if requested is not None else default_mode()


def connect(scheduler: str | None):
    """A Dask client of the scheduler at that address (closed on leaving the `with`), or None, with which
    a phobos.dag.Session starts a LocalCluster of its own."""
    if scheduler is None:
        return contextlib.nullcontext()
    from distributed import Client
    return Client(scheduler)


def time_on_gpu(fn, arrays: list[np.ndarray], **scalars) -> float:
    """Milliseconds per call of fn(*arrays, **scalars): on torch tensors when torch is there (no copies),
    else on the numpy arrays (copies to and from the GPU included)."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        on_gpu = [torch.from_numpy(x).cuda() for x in arrays]
        print("timing on torch tensors")
        return benchmark(lambda: fn(*on_gpu, **scalars))
    print("timing on numpy arrays, copies to and from the GPU included")
    return benchmark(lambda: fn(*arrays, **scalars))


def report(name: str, got: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> bool:
    error = float(np.max(np.abs(got - expected))) if got.size else 0.0
    ok = bool(np.allclose(got, expected, rtol=rtol, atol=atol))
    print(f"{name}: max |error| = {error:.3g}: {'ok' if ok else 'WRONG'}")
    return ok


def run(main) -> None:
    """Run main() as a script: its return code, or a Phobos error printed as Phobos prints it."""
    try:
        sys.exit(main())
    except phobos.PhobosError as error:
        print(f"{sys.argv[0]}: {error.diagnostic()}", file=sys.stderr)
        sys.exit(1)
