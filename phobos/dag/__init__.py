# The tile DAG: one Phobos program over many GPUs and machines, on Dask
# distributed (docs/distributed.md is the design).
#
#   region.py   boxes in a tensor's coordinates
#   access.py   which grid axes a kernel's launch can be cut along (tile IR)
#   split.py    how many tasks a call becomes (the granularity rule), which cells each gets
#   graph.py    tasks, regions, pieces (who owns what), RAW/WAR/WAW edges, DagError
#   blocks.py   blocks on the CPU (numpy) and on a GPU (DeviceBlock); assembling regions
#   execute.py  the task a worker is sent (TaskSpec), running it, TaskError
#   worker.py   the Dask worker plugin (mode, CUDA context, kernels) and the Dask tasks
#   cluster.py  the LocalCluster started when no client is given
#   session.py  Session, Tensor, kernels called on tensors
#
# What enters is kernel source and calls on distributed tensors; what leaves
# is Dask tasks, and in the end numpy arrays (Tensor.gather).  Only
# session.py, worker.py and cluster.py need Dask, and import it when used.
from __future__ import annotations

from .execute import TaskError
from .graph import RAW, WAR, WAW, DagError, Graph, Task
from .region import Box
from .session import DagKernel, DagModule, Session, Tensor, measure_overhead
from .split import OVERHEAD_SHARE, task_count

__all__ = ["Box", "DagError", "DagKernel", "DagModule", "Graph", "OVERHEAD_SHARE", "RAW", "Session", "Task",
           "TaskError", "Tensor", "WAR", "WAW", "measure_overhead", "task_count"]
