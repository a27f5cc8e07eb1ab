# The cluster a Session starts when it is given no client: on this machine,
# one worker process per GPU (each seeing only its own GPU, through
# CUDA_VISIBLE_DEVICES, as dask-cuda's LocalCUDACluster does; several workers
# may share one GPU), or CPU worker processes where there is no GPU.  Every
# worker has one thread: a GPU runs one task's kernel at a time anyway, and
# on the CPU separate processes sidestep the GIL.  GPU workers get no
# host-memory limit, which would make Dask spill device blocks to disk.
from __future__ import annotations

import os
from typing import Any

CPU_MODES = ("emulate", "interpret")


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries; no CUDA context is made."""
    try:
        import pycuda.driver as driver
        driver.init()
        count = driver.Device.count()
    except Exception:  # no PyCUDA, no driver, no device: no GPU to use
        return []
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def start_cluster(workers: int | None, gpus: int | list[str] | None, mode: str | None) -> Any:
    """A cluster on this machine: one worker per GPU (workers=n: n workers sharing the GPUs round-robin;
    gpus=k: the first k), or `workers` CPU processes (default: one per core) for CPU modes or no GPU."""
    from distributed import LocalCluster, Nanny, Scheduler, SpecCluster

    devices = [] if mode in CPU_MODES else visible_gpus()
    if isinstance(gpus, int):
        devices = devices[:gpus]
    elif gpus is not None:
        devices = [str(g) for g in gpus]
    if not devices:
        return LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                            dashboard_address=None)
    count = workers or len(devices)
    spec = {f"gpu-{i}": {"cls": Nanny, "options": {"nthreads": 1, "memory_limit": 0,
                                                    "env": {"CUDA_VISIBLE_DEVICES": devices[i % len(devices)]}}}
            for i in range(count)}
    return SpecCluster(workers=spec, scheduler={"cls": Scheduler, "options": {"dashboard_address": None}})
