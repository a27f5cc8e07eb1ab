"""The tile DAG on Dask: overhead per task and block transfers, and SGEMM split over workers against the direct call.

    python benchmarks/bench_dag.py --overhead [--workers 2]             # any machine: Dask's costs, CPU workers
    python benchmarks/bench_dag.py [--size 16384] [--workers 1,2,4]     # one GPU, shared by 1, 2 and 4 workers
    python benchmarks/bench_dag.py --gpus 8 [--size 32768]              # one worker per GPU: 1, 2, 4, 8 GPUs

--overhead measures, on a LocalCluster of CPU worker processes, what
docs/distributed.md's granularity rule and scaling model need: seconds per
task of a burst of no-op tasks on one worker (what a Session measures for the
rule) and spread over all workers, the latency of a chain of dependent tasks,
and the bandwidth of moving a block from one worker to another.

The GPU runs compute C = A @ B (fp32, examples/sgemm.phobos with one fixed
configuration, --config, so nothing is tuned and both sides run the same code)
on square matrices.  The direct call runs in this process on torch tensors,
timed with CUDA events.  The DAG runs on a Session of GPU workers: A and B are
made on the workers in blocks (A by rows, B by columns, one block per worker),
one untimed call compiles, loads and calibrates the split, then each timed call
is submitted and waited for (wall time, Dask and any block transfers
included: "end to end"); each worker's log gives the seconds its tasks' kernels
took ("compute": the busiest worker).  A 256 x 256 corner of C is checked
against the direct call's, bit for bit.  Efficiency is T_direct / (G x T_G)
for G GPUs; the model of docs/distributed.md, section 9, is printed beside it.
Prints a table, writes JSON and a PNG plot (bench_results/).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import date
from pathlib import Path

import numpy as np

import phobos
from phobos import dag
from phobos.dag.worker import task_log

ROOT = Path(__file__).parent.parent
SGEMM = ROOT / "examples" / "sgemm.phobos"
TILE = 1024  # matrices are made of TILE x TILE random tiles, so any block layout gives the same matrix
CHECKED = 256  # the corner of C compared with the direct call
TRANSFER_BYTES = [1 << 20, 16 << 20, 256 << 20]


# ---------------------------------------------------------------------------
# Data, made where it is used


def matrix(seed: int):
    """The function a block of a seeded random matrix is made by, for Session.from_function."""
    def part(index: tuple[slice, slice]) -> np.ndarray:
        rows, cols = index
        out = np.empty((rows.stop - rows.start, cols.stop - cols.start), np.float32)
        for r0 in range(rows.start // TILE * TILE, rows.stop, TILE):
            for c0 in range(cols.start // TILE * TILE, cols.stop, TILE):
                tile = np.random.default_rng([seed, r0, c0]).standard_normal((TILE, TILE), dtype=np.float32)
                r, c = slice(max(r0, rows.start), min(r0 + TILE, rows.stop)), \
                    slice(max(c0, cols.start), min(c0 + TILE, cols.stop))
                out[r.start - rows.start:r.stop - rows.start, c.start - cols.start:c.stop - cols.start] = \
                    tile[r.start - r0:r.stop - r0, c.start - c0:c.stop - c0]
        return out
    return part


# ---------------------------------------------------------------------------
# Dask's costs


def chain_latency(client, length: int = 50) -> float:
    """Seconds per task of a chain of dependent no-op tasks."""
    def step(previous=None):
        return None
    step(), client.submit(step, pure=False).result()
    start = time.perf_counter()
    future = client.submit(step, pure=False)
    for _ in range(length - 1):
        future = client.submit(step, future, pure=False)
    future.result()
    return (time.perf_counter() - start) / length


def burst_all(client, tasks: int) -> float:
    """Seconds per task of a burst of independent no-op tasks spread over every worker."""
    from phobos.dag.worker import noop
    client.gather([client.submit(noop, pure=False) for _ in range(tasks)])
    start = time.perf_counter()
    client.gather([client.submit(noop, pure=False) for _ in range(tasks)])
    return (time.perf_counter() - start) / tasks


def transfer_gbps(client, mode: str | None, nbytes: int) -> float:
    """GB/s of moving one block (a DeviceBlock on GPU workers) from one worker to a task on another that
    uses it: the best of three, the task's own latency included (small blocks are latency-bound)."""
    def make(size):
        from phobos.dag.worker import plugin
        _, arrays = plugin().arrays(mode)
        with arrays.current():
            return arrays.adopt(np.ones(size // 4, np.float32))

    def use(block):
        from phobos.dag.worker import plugin
        _, arrays = plugin().arrays(mode)
        with arrays.current():
            arrays.adopt(block)
            arrays.synchronize()
        return None

    from distributed import wait
    source, target = sorted(client.nthreads())[:2]
    times = []
    for _ in range(3):
        block = client.submit(make, nbytes, pure=False, workers=[source])
        wait(block)
        start = time.perf_counter()
        client.submit(use, block, pure=False, workers=[target]).result()
        times.append(time.perf_counter() - start)
    return nbytes / min(times) / 1e9


def overhead_main(args) -> None:
    from distributed import Client, LocalCluster
    workers = args.workers[0] if args.workers else 2
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        dag.Session(client, mode="emulate", task_overhead=1.0)  # registers the worker plugin
        rows = [{"measure": "no-op burst, one worker (the rule's o)", "value": dag.measure_overhead(client) * 1e3,
                 "unit": "ms/task"},
                {"measure": f"no-op burst, {workers} workers", "value": burst_all(client, 200) * 1e3,
                 "unit": "ms/task"},
                {"measure": "chain of dependent no-ops", "value": chain_latency(client) * 1e3, "unit": "ms/task"}]
        rows += [{"measure": f"block of {n >> 20} MiB to a task on another worker",
                  "value": transfer_gbps(client, "emulate", n),
                  "unit": "GB/s"} for n in TRANSFER_BYTES]
    for row in rows:
        print(f"{row['measure']:>42}: {row['value']:8.2f} {row['unit']}")
    print(f"wrote {write('dag_overhead', rows, {'workers': workers, 'cpus': os.cpu_count()}, args.out)}")


# ---------------------------------------------------------------------------
# SGEMM: the direct call and the DAG


def direct(size: int, config: dict, repeat: int) -> tuple[float, np.ndarray]:
    """Milliseconds of the direct call on this process's GPU, and the checked corner of C."""
    import torch
    from common import gpu_ms
    sgemm = phobos.load(SGEMM, mode="gpu").sgemm.configure(**config)
    whole = (slice(0, size), slice(0, size))
    a, b = (torch.from_numpy(matrix(seed)(whole)).cuda() for seed in (1, 2))
    c = torch.zeros(size, size, device="cuda")
    sgemm(a, b, c, alpha=1.0, beta=0.0)
    corner = c[:CHECKED, :CHECKED].cpu().numpy()
    return gpu_ms(lambda: sgemm(a, b, c, alpha=1.0, beta=0.0), warmup=1, repeat=repeat), corner


def on_dag(size: int, config: dict, repeat: int, workers: int, gpus: int) -> dict:
    """One Session of `workers` GPU workers on `gpus` GPUs: wall and busiest-worker kernel time per call."""
    with dag.Session(workers=workers, gpus=gpus, mode="gpu") as session:
        count = session.workers
        sgemm = session.load(SGEMM).sgemm.configure(**config)
        A = session.from_function((size, size), "float32", matrix(1), blocks=(count, 1))
        B = session.from_function((size, size), "float32", matrix(2), blocks=(1, count))
        C = session.zeros((size, size))
        sgemm(A, B, C, alpha=1.0, beta=0.0)  # compiles, loads, calibrates the split
        session.wait()
        walls = []
        for _ in range(repeat):
            start = time.perf_counter()
            sgemm(A, B, C, alpha=1.0, beta=0.0)
            session.wait()
            walls.append(time.perf_counter() - start)
        timed = {f"sgemm (call {n})" for n in range(2, repeat + 2)}
        busy = max(sum(seconds for label, seconds in log if label.split(",")[0] in timed)
                   for log in session.client.run(task_log).values())
        corner = C[:CHECKED, :CHECKED].gather()
        transfer = transfer_gbps(session.client, session.mode, 256 << 20) if count > 1 else None
        return {"workers": count, "gpus": gpus, "split": list(sgemm.last_split),
                "tasks": int(np.prod(sgemm.last_split)), "wall_ms": statistics.median(walls) * 1e3,
                "busy_ms": busy / repeat * 1e3, "overhead_ms": session.task_overhead * 1e3,
                "transfer_gbps": transfer, "corner": corner}


def model_efficiency(t1_ms: float, gpus: int, split: list[int], size: int, overhead_ms: float,
                     gbps: float | None) -> float:
    """docs/distributed.md, section 9, with e_c = 1: T_G = T_1 / G + o + V_G / BW."""
    p, q = (split + [1, 1])[:2]
    moved = 4 * max(size * size / p + size * size / q - 2 * size * size / gpus, 0.0) if gpus > 1 else 0.0
    transfer_ms = moved / (gbps * 1e9) * 1e3 if gbps else 0.0
    return t1_ms / (gpus * (t1_ms / gpus + overhead_ms + transfer_ms))


def gpu_main(args) -> None:
    from common import device_name, plot, table
    config = dict(zip(("TILE_M", "TILE_N", "TILE_K"), (int(v) for v in args.config.split(","))))
    size = args.size or (32768 if args.gpus > 1 else 16384)
    flops = 2 * size ** 3
    t1, reference = direct(size, config, args.repeat)
    import torch
    torch.cuda.empty_cache()  # the direct call's matrices are gone; give their memory back to the workers
    print(f"direct: {size}^3 in {t1:.1f} ms ({flops / t1 / 1e9:.1f} TFLOP/s), configuration {config}", flush=True)
    runs = [(g, g) for g in (1, 2, 4, 8) if g <= args.gpus] if args.gpus > 1 else \
        [(w, 1) for w in args.workers or [1, 2, 4]]
    rows = []
    for workers, gpus in runs:
        found = on_dag(size, config, args.repeat, workers, gpus)
        corner = found.pop("corner")
        found.update({
            "same_bits": bool(np.array_equal(corner, reference)), "direct_ms": t1,
            "dag_over_direct": found["wall_ms"] / t1,
            "efficiency_compute": t1 / (gpus * found["busy_ms"]),
            "efficiency_end_to_end": t1 / (gpus * found["wall_ms"]),
            "model_end_to_end": model_efficiency(t1, gpus, found["split"], size, found["overhead_ms"],
                                                 found["transfer_gbps"]),
            "tflops": flops / found["wall_ms"] / 1e9})
        rows.append(found)
        print(f"{workers} workers on {gpus} GPU{'s' * (gpus > 1)}: {found['tasks']} tasks, {found['wall_ms']:.1f} ms "
              f"(busiest kernel {found['busy_ms']:.1f} ms), same bits: {found['same_bits']}", flush=True)
    columns = [("workers", "workers", ""), ("gpus", "GPUs", ""), ("tasks", "tasks", ""),
               ("wall_ms", "DAG ms", ".1f"), ("busy_ms", "busiest kernel ms", ".1f"),
               ("dag_over_direct", "DAG / direct", ".3f"), ("efficiency_compute", "eff. compute", ".2f"),
               ("efficiency_end_to_end", "eff. end to end", ".2f"), ("model_end_to_end", "model", ".2f"),
               ("same_bits", "same bits", "")]
    print(table(rows, columns))
    name = "dag_multi_gpu" if args.gpus > 1 else "dag"
    meta = {"size": size, "config": config, "direct_ms": t1, "repeat": args.repeat, "device": device_name()}
    print(f"direct {t1:.1f} ms; wrote {write(name, rows, meta, args.out)}")
    for row in rows:
        row["label"] = f"{row['workers']} workers / {row['gpus']} GPU{'s' * (row['gpus'] > 1)}"
    plot(name, rows, "label", [("efficiency_compute", "compute"), ("efficiency_end_to_end", "end to end"),
                               ("model_end_to_end", "model")], "efficiency vs direct call", args.out)


def write(name: str, rows: list[dict], meta: dict, out_dir: str) -> Path:
    path = Path(out_dir) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmark": name, "date": date.today().isoformat(), "phobos": phobos.__version__,
                                **meta, "rows": rows}, indent=2))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overhead", action="store_true", help="measure Dask's costs on CPU workers (no GPU)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs of this host to scale over (1: share one)")
    parser.add_argument("--workers", help="workers sharing the one GPU (default 1,2,4; --overhead: 2)")
    parser.add_argument("--size", type=int, help="M = N = K (default 16384; 32768 with --gpus > 1)")
    parser.add_argument("--config", default="64,128,32", help="TILE_M,TILE_N,TILE_K (default 64,128,32)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default="bench_results")
    args = parser.parse_args()
    args.workers = [int(w) for w in args.workers.split(",")] if args.workers else None
    overhead_main(args) if args.overhead else gpu_main(args)


if __name__ == "__main__":
    main()
