"""Shared helpers of the GPU benchmarks: fair timing, tables, JSON and plots.

Two timings, each the same for Phobos and its reference:

- `call_ms`, what users get: the documented call (`mod.k(...)` on torch
  tensors, `torch.add(...)`) made back to back on torch's current stream,
  between two CUDA events, so the host's time to make each call counts
  wherever it is longer than the GPU's work; the median over samples.
- `gpu_ms` / `time_phobos`, the kernel alone: before the start event the GPU
  is given ~100 microseconds of busy work (`torch.cuda._sleep`), so the host's
  time to queue the call is hidden; Phobos kernels are launched directly on
  the configuration the autotuner chose.
"""
from __future__ import annotations

import json
import math
import platform
import statistics
import sys
from datetime import date
from pathlib import Path

import phobos
from phobos.run import runtime

try:  # the GPU benchmarks need torch; the CPU ones use only the table, JSON and plot helpers
    import torch
except ImportError:
    torch = None

SPIN_CYCLES = 200_000  # about 100 microseconds at 2 GHz


def gpu_ms(fn, warmup: int = 3, repeat: int = 20) -> float:
    """Median GPU milliseconds of `fn()` (host queueing hidden behind a busy GPU)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SPIN_CYCLES)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def call_ms(fn, warmup: int = 3, repeat: int = 20, min_sample_ms: float = 2.0, max_calls: int = 500) -> float:
    """Median milliseconds per call of `fn()` made back to back between CUDA events (host cost included).

    Each sample makes enough calls to last about `min_sample_ms` (set by one
    timed call first), so the events' resolution is not felt and a host slower
    than the GPU shows.
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    first = sample_ms(fn, 1)
    calls = max(1, min(max_calls, int(min_sample_ms / max(first, 1e-4))))
    return statistics.median(sample_ms(fn, calls) for _ in range(repeat))


def sample_ms(fn, calls: int) -> float:
    """Milliseconds per call of `calls` calls of `fn()` made back to back between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def timed_ms(*fns, min_sample_ms: float = 20.0, samples: int = 7) -> list[float]:
    """Milliseconds per call of each function, called back to back between two CUDA events; the median of
    `samples` samples each, taken in turn (Phobos, reference, peer, Phobos, ...) so that all run through
    the same clock and power states of the GPU, which drift under a sustained load."""
    counts = []
    for fn in fns:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        counts.append(max(1, min(1000, math.ceil(min_sample_ms / max(sample_ms(fn, 1), 1e-3)))))
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(samples):
        for fn, calls, out in zip(fns, counts, times):
            out.append(sample_ms(fn, calls))
    return [statistics.median(t) for t in times]


def ptx_arguments(compiled, values: dict) -> list:
    """The kernel's PTX arguments in order: tensors and scalars by name, sizes from tensor shapes."""
    sizes = {}
    args = []
    for p in compiled.params:
        if p.kind == "tensor":
            t = values[p.name]
            sizes.update({d: n for d, n in zip(p.dims, t.shape) if isinstance(d, str)})
    for p in compiled.params:
        args.append(sizes[p.name] if p.kind == "size" else values[p.name])
    return args


def time_phobos(fn, values: dict, grid: tuple, repeat: int = 20) -> float:
    """GPU milliseconds of the configuration the kernel callable `fn` last ran, launched directly."""
    compiled = fn.compiled
    ctas = compiled.launch_grid(tuple(grid) + (1,) * (3 - len(grid)),  # a cluster per program (CLUSTER)
                                torch.cuda.get_device_properties(0).multi_processor_count)
    with runtime.prepared_launch(runtime.load_module(compiled.ptx), compiled.kernel_name, ctas,
                                 (compiled.threads,), ptx_arguments(compiled, values),
                                 compiled.shared_bytes) as launch:
        return gpu_ms(launch, repeat=repeat)


def device_name() -> str:
    return torch.cuda.get_device_name(0)


def table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """Rows as a text table; columns are (key, heading, format); '-' where a row has no such key."""
    heads = [h for _, h, _ in columns]
    cells = [["-" if k not in r else format(r[k], f) if f else str(r[k]) for k, _, f in columns] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def cpu_name() -> str:
    return f"CPU ({platform.processor() or platform.machine()}, Python {platform.python_version()})"


def save(name: str, rows: list[dict], meta: dict, out_dir: str, device: str | None = None) -> Path:
    path = Path(out_dir) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "date": date.today().isoformat(), "device": device or device_name(),
               "phobos": phobos.__version__, "torch": torch.__version__ if torch is not None else None, **meta,
               "rows": rows}
    path.write_text(json.dumps(payload, indent=2))
    return path


def plot(name: str, rows: list[dict], x: str, series: list[tuple[str, str]], ylabel: str, out_dir: str,
         device: str | None = None) -> Path | None:
    """A PNG of each series against x (a row without a series' key has no bar there; skipped, with a note,
    where matplotlib is missing)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [str(r[x]) for r in rows]
    width = 0.8 / len(series)
    for i, (key, label) in enumerate(series):
        ax.bar([j + i * width for j in range(len(rows))], [r.get(key, 0) for r in rows], width, label=label)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(rows))], labels, rotation=20)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{name} on {device or device_name()}")
    ax.legend()
    fig.tight_layout()
    path = Path(out_dir) / f"{name}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def sweep_plot(name: str, rows: list[dict], kernels: list[str], key: str, label: str, out_dir: str,
               device: str | None = None) -> Path | None:
    """A map per kernel of `key` over its shapes (columns across, rows down), each cell written out and
    colored by how far it is from 1 (skipped, with a note, where matplotlib is missing)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import LogNorm
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return None
    fig, axes = plt.subplots(1, len(kernels), figsize=(5 * len(kernels), 4), squeeze=False)
    for ax, kernel in zip(axes[0], kernels):
        mine = [r for r in rows if r["kernel"] == kernel]
        widths = sorted({r["columns"] for r in mine})
        counts = sorted({r["rows"] for r in mine})
        grid = [[float("nan")] * len(widths) for _ in counts]
        for r in mine:
            grid[counts.index(r["rows"])][widths.index(r["columns"])] = r[key]
        ax.imshow(grid, cmap="RdYlGn", norm=LogNorm(vmin=0.5, vmax=2.0), aspect="auto")
        for i, line in enumerate(grid):
            for j, value in enumerate(line):
                if value == value:
                    ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(widths)), [str(n) for n in widths], rotation=30)
        ax.set_yticks(range(len(counts)), [str(m) for m in counts])
        ax.set_xlabel("columns")
        ax.set_ylabel("rows")
        ax.set_title(kernel)
    fig.suptitle(f"{name}: {label}, on {device or device_name()}")
    fig.tight_layout()
    path = Path(out_dir) / f"{name}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
