# The tile DAG on Dask: a LocalCluster of two CPU worker processes running
# the emulator or the interpreter, checked against direct calls of the same
# kernels (bit for bit where the same code runs), plus the refusals, a task
# that fails on a worker, the granularity rule, the examples (each on a
# LocalCluster of its own), and a worker killed in the middle of a DAG.
# The GPU test (marked `gpu`) runs the same split on GPU workers.
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import phobos
from phobos.errors import LaunchError

distributed = pytest.importorskip("distributed",
                                  reason="needs Dask distributed: pip install 'phobos-tile[distributed]'")
from phobos import dag  # noqa: E402

EXAMPLES = Path(__file__).parent.parent / "examples"

BIG_TILES = """\
@autotune(T in [256])
kernel big(A: tensor<f32>[M, K], B: tensor<f32>[K, N], C: tensor<f32>[M, N]) {
    let pm = program_id(0) * T
    let pn = program_id(1) * T
    C[pm :+ T, pn :+ T] = dot(A[pm :+ T, 0 :+ 256], B[0 :+ 256, pn :+ T])
}
"""


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """Two worker processes of one thread each, with a Phobos cache of their own."""
    cache = tmp_path_factory.mktemp("worker-cache")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  env={"PHOBOS_CACHE_DIR": str(cache)}) as cluster, \
            distributed.Client(cluster) as client:
        yield client


@pytest.fixture
def emulated(client):
    session = dag.Session(client, mode="emulate", task_overhead=0.002)
    yield session
    session.close()


@pytest.fixture
def interpreted(client):
    session = dag.Session(client, mode="interpret", task_overhead=0.002)
    yield session
    session.close()


def random(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def direct(name: str, mode: str):
    return getattr(phobos.load(EXAMPLES / f"{name}.phobos", mode=mode), name)


def test_sgemm_split_in_two_dimensions_is_the_direct_call_bit_for_bit(emulated):
    M, K, N = 96, 40, 160  # 3 x 3 cells of 32 x 64 (the first configuration); the last column partial
    a, b = random((M, K), 1), random((K, N), 2)
    kernels = emulated.load(EXAMPLES / "sgemm.phobos")
    A, B = emulated.from_array(a, blocks=(3, 1)), emulated.from_array(b, blocks=(1, 2))
    C = emulated.zeros((M, N))
    kernels.sgemm.split((3, 2))(A, B, C, alpha=1.0, beta=0.0)
    expected = np.zeros((M, N), np.float32)
    direct("sgemm", "emulate")(a, b, expected, 1.0, 0.0)
    assert np.array_equal(C.gather(), expected)
    tasks = [t for t in emulated.graph.tasks if t.label.startswith("sgemm")]
    assert len(tasks) == 6 and kernels.sgemm.last_split == (3, 2)
    assert [t.label for t in tasks[:2]] == ["sgemm (call 1), grid slice M[0:32] x N[0:64]",
                                            "sgemm (call 1), grid slice M[0:32] x N[64:160]"]
    a_blocks, b_blocks = ([t for t in emulated.graph.tasks if t.label.startswith(f"block {name}")]
                          for name in ("t0", "t1"))
    assert set(tasks[0].dependencies) == {a_blocks[0], b_blocks[0]}  # N[0:64] lies in B's first block
    assert set(tasks[1].dependencies) == {a_blocks[0], *b_blocks}  # N[64:160] straddles both
    assert sorted(box.ranges for box, _ in C.owners()) == sorted(t.outputs[0].box.ranges for t in tasks)


def test_chain_gemm_softmax_gemm_is_the_direct_chain_bit_for_bit(interpreted):
    M, K, N, P = 256, 32, 48, 40  # softmax's cells are 64 rows (its largest ROWS): four of them
    a, b, d = random((M, K), 3), random((K, N), 4), random((N, P), 5)
    gemm = interpreted.load(EXAMPLES / "sgemm.phobos").sgemm
    softmax = interpreted.load(EXAMPLES / "softmax.phobos").softmax
    A, B, D = interpreted.from_array(a), interpreted.from_array(b), interpreted.from_array(d)
    X, Y, Z = interpreted.zeros((M, N)), interpreted.zeros((M, N)), interpreted.zeros((M, P))
    gemm.split((2, 1))(A, B, X, 1.0, 0.0)
    softmax.split(4)(X, Y)
    gemm.split((2, 1))(Y, D, Z, 1.0, 0.0)
    x, y, z = np.zeros((M, N), np.float32), np.zeros((M, N), np.float32), np.zeros((M, P), np.float32)
    direct("sgemm", "interpret")(a, b, x, 1.0, 0.0)
    direct("softmax", "interpret")(x, y)
    direct("sgemm", "interpret")(y, d, z, 1.0, 0.0)
    assert np.array_equal(Z.gather(), z) and np.array_equal(Y.gather(), y)
    first_gemm = [t for t in interpreted.graph.tasks if t.label.startswith("sgemm (call 1)")]
    rows = [t for t in interpreted.graph.tasks if t.label.startswith("softmax")]
    assert [set(t.dependencies) for t in rows] == [{first_gemm[0]}] * 2 + [{first_gemm[1]}] * 2


def test_summa_panels_accumulate_through_views(interpreted):
    M, K, N, panel = 64, 96, 64, 32
    a, b = random((M, K), 6), random((K, N), 7)
    gemm = interpreted.load(EXAMPLES / "sgemm.phobos").sgemm.split((2, 1))
    A, B = interpreted.from_array(a, blocks=(1, 3)), interpreted.from_array(b, blocks=(3, 1))
    C = interpreted.zeros((M, N))
    for k in range(0, K, panel):
        gemm(A[:, k:k + panel], B[k:k + panel, :], C, alpha=1.0, beta=1.0)
    np.testing.assert_allclose(C.gather(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    panels = [t for t in interpreted.graph.tasks if t.label.startswith("sgemm")]
    assert len(panels) == 6 and all(t.outputs[0].box.shape == (32, 64) for t in panels)
    assert panels[0] in panels[2].dependencies and panels[2] in panels[4].dependencies  # each k step after the last


def test_in_place_element_wise_calls_run_and_racing_ones_are_refused(interpreted):
    x, y = random((5000,), 8), random((5000,), 9)
    add = interpreted.load(EXAMPLES / "add.phobos").add
    X, Y = interpreted.from_array(x), interpreted.from_array(y)
    add(X, Y, X)  # every program reads exactly the elements it writes
    assert np.array_equal(X.gather(), x + y)
    with pytest.raises(dag.DagError, match="overlap in t0\\[50:100\\] and the kernel writes 'c'"):
        add(X[0:100], Y[0:100], X[50:150])
    gemm = interpreted.load(EXAMPLES / "sgemm.phobos").sgemm
    S = interpreted.zeros((64, 64))
    with pytest.raises(dag.DagError, match="'A' \\(t2\\[0:64, 0:64\\]\\) and 'C' \\(t2\\[0:64, 0:64\\]\\) overlap"):
        gemm(S, S, S, 1.0, 0.0)


def test_bad_arguments_are_refused_on_the_client(client, interpreted):
    gemm = interpreted.load(EXAMPLES / "sgemm.phobos").sgemm
    A, C = interpreted.zeros((8, 4)), interpreted.zeros((8, 6))
    with pytest.raises(LaunchError, match="argument 'B': expected a 2-D f32 phobos.dag tensor \\[K, N\\], "
                                          "got float32 array of shape \\(4, 6\\)"):
        gemm(A, np.zeros((4, 6), np.float32), C, 1.0, 0.0)
    with pytest.raises(LaunchError, match="argument 'B': .* with K = 4 from an earlier argument, got float32 "
                                          "tensor 't\\d+' of shape \\(5, 6\\)"):
        gemm(A, interpreted.zeros((5, 6)), C, 1.0, 0.0)
    with pytest.raises(LaunchError, match="argument 'A': .* got float64 tensor"):
        gemm(interpreted.zeros((8, 4), "float64"), interpreted.zeros((4, 6)), C, 1.0, 0.0)
    with pytest.raises(LaunchError, match="argument 'alpha'"):
        gemm(A, interpreted.zeros((4, 6)), C, "one", 0.0)
    other = dag.Session(client, mode="interpret", task_overhead=0.002)
    with pytest.raises(dag.DagError, match="argument 'B' is a tensor of another session"):
        gemm(A, other.zeros((4, 6)), C, 1.0, 0.0)
    copy = interpreted.jit("@autotune(B in [64, 128])\n@require(M >= B)\n"
                           "kernel copy(x: tensor<f32>[M], y: tensor<f32>[M]) {\n"
                           "    y[program_id(0) * B :+ B] = x[program_id(0) * B :+ B]\n}\n", "copy.phobos").copy
    with pytest.raises(LaunchError, match="copy: no configuration can serve M=10: @require\\(M >= B\\) at "
                                          "copy.phobos:2:10 does not hold for B=64"):
        copy(interpreted.zeros((10,)), interpreted.zeros((10,)))


def test_kernels_without_an_inferable_grid_take_one_and_run_as_one_task(interpreted):
    vector_sum = interpreted.load(EXAMPLES / "vector_sum.phobos").vector_sum
    x = random((20000,), 10)
    X, total = interpreted.from_array(x), interpreted.zeros((1,))
    with pytest.raises(LaunchError, match="cannot infer its grid along axis 0 .* give the grid"):
        vector_sum(X, total)
    vector_sum[(5,)](X, total)  # 5 programs of 4096 elements
    np.testing.assert_allclose(total.gather()[0], x.astype(np.float64).sum(), rtol=1e-5)
    assert interpreted.graph.tasks[-1].label == "vector_sum (call 1), whole grid (5, 1, 1)"


def test_a_task_that_fails_names_kernel_slice_and_worker_and_nothing_partial_is_returned(emulated):
    big = emulated.jit(BIG_TILES, "big.phobos").big
    gemm = emulated.load(EXAMPLES / "sgemm.phobos").sgemm.split((1, 1))
    A, B, C, D = (emulated.zeros(shape) for shape in [(512, 8), (8, 512), (512, 512), (512, 64)])
    big.split((2, 1))(A, B, C)
    gemm(C, D, emulated.zeros((512, 64)), 1.0, 0.0)  # depends on the failed tasks, so never runs
    pattern = (r"big \(call 1\), grid slice M\[(0:256|256:512)\] x N\[0:512\] failed on worker tcp://[\d.:]+: "
               r"big.phobos:5:27: this needs \d+ bytes of shared memory")
    with pytest.raises(dag.TaskError, match=pattern):
        C.gather()
    with pytest.raises(dag.TaskError, match=r"big \(call 1\), grid slice M\[0:256\] x N\[0:512\] failed"):
        emulated.wait()  # the first failure, in the order tasks were added


ASSERTING = """\
@autotune(T in [4])
kernel k(x: tensor<f32>[N], y: tensor<f32>[N]) {
    let p = program_id(0) * T
    device_assert(x[p :+ T] < 100.0, "too big")
    y[p :+ T] = x[p :+ T]
}
"""


def test_a_failing_device_assert_names_the_calls_program_and_the_tasks_slice(interpreted):
    """Element 50 is in program 12 of the call, which a task of the slice N[48:64] runs as its program 0."""
    k = interpreted.jit(ASSERTING, "assert.phobos").k.split((4,))
    x = np.zeros(64, np.float32)
    x[50] = 1000
    y = interpreted.zeros((64,))
    k(interpreted.from_array(x), y)
    with pytest.raises(dag.TaskError) as raised:
        y.gather()
    message = str(raised.value)
    assert "k (call 1), grid slice N[48:64] failed on worker" in message
    assert "note: in program instance (12, 0, 0) of kernel 'k'" in message
    assert message.endswith("(program ids are the call's: the programs of this task's slice start at (12, 0, 0))")


def test_the_granularity_rule_splits_only_calls_worth_splitting(client):
    a, b = random((64, 32), 11), random((32, 128), 12)
    for overhead, expected_tasks in ((1e3, 1), (1e-9, 2)):  # an overhead that no work repays; one that is free
        session = dag.Session(client, mode="interpret", task_overhead=overhead)
        gemm = session.load(EXAMPLES / "sgemm.phobos").sgemm
        C = session.zeros((64, 128))
        gemm(session.from_array(a), session.from_array(b), C, 1.0, 0.0)
        assert np.prod(gemm.last_split) == expected_tasks and gemm.last_estimate > 0
        np.testing.assert_allclose(C.gather(), a @ b, rtol=1e-5, atol=1e-5)


def test_the_overhead_per_task_is_measured(interpreted):
    seconds = dag.measure_overhead(interpreted.client, tasks=8)
    assert 0 < seconds < 1


@pytest.mark.parametrize("script, mode, own_cluster", [("dag_sgemm.py", "emulate", False),
                                                      ("dag_chain.py", "interpret", True)])
def test_the_dag_examples_run_on_cpu_workers(client, script, mode, own_cluster):
    """dag_sgemm on this module's cluster (--scheduler); dag_chain on the LocalCluster a session starts
    (of one worker process, which starts fastest)."""
    root = Path(__file__).parent.parent
    where = ["--workers", "1"] if own_cluster else ["--scheduler", client.scheduler.address]
    done = subprocess.run([sys.executable, str(root / "examples" / script), "--mode", mode, *where],
                          capture_output=True, text=True, cwd=root, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    workers = "1 worker" if own_cluster else "2 workers"
    assert f"mode = {mode}, {workers};" in done.stdout or f"mode = {mode}, {workers}," in done.stdout
    assert ": ok" in done.stdout


def test_a_worker_killed_in_the_middle_of_a_dag_changes_nothing(client):
    """Two workers run a chain of split matrix products, the second of which also waits for a slow
    input.  Once the first product's blocks exist, the worker holding the most of them is killed while
    the rest of the DAG is pending: Dask recomputes the lost blocks from their lineage and the result
    is still the direct calls' result, bit for bit."""
    M = K = 64
    a, b = random((M, K), 14), random((K, K), 15)

    def slow_zeros(index):
        time.sleep(1.5)
        return np.zeros((index[0].stop - index[0].start, index[1].stop - index[1].start), np.float32)

    with dag.Session(client, mode="interpret", task_overhead=0.002) as session:  # the last test of this cluster
        gemm = session.load(EXAMPLES / "sgemm.phobos").sgemm.split((2, 1))
        A, B = session.from_array(a, blocks=(4, 1)), session.from_array(b)
        X, Y, Z = (session.zeros((M, K)) for _ in range(3))
        slow = session.from_function((M, K), "float32", slow_zeros, blocks=(1, 1))
        gemm(A, B, X, 1.0, 0.0)
        gemm(slow, B, Y, 1.0, 0.0)
        gemm(X, B, Y, 1.0, 1.0)  # Y = X B + slow B
        gemm(Y, B, Z, 1.0, 0.0)
        futures = dict(session._futures)
        distributed.wait([f for t, f in futures.items() if t.label.startswith("sgemm (call 1)")])
        ours = {f.key for f in futures.values()}
        held = {address: len(ours & set(keys)) for address, keys in client.has_what().items()}
        victim = max(held, key=held.get)
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        assert held[victim] > 0 and not futures[max(futures, key=lambda t: t.number)].done()
        z = Z.gather()
    x, y, expected = (np.zeros((M, K), np.float32) for _ in range(3))
    run = direct("sgemm", "interpret")
    run(a, b, x, 1.0, 0.0)
    run(x, b, y, 1.0, 1.0)
    run(y, b, expected, 1.0, 0.0)
    assert np.array_equal(z, expected)


def test_every_worker_killed_after_a_call_recomputes_the_result():
    """SIGKILL every worker process of a LocalCluster once a call is done: the nannies restart them, and
    gather() recomputes the blocks from their lineage (it waited forever: the blocks' tasks were pinned to
    workers that no longer existed)."""
    a, b = random((64, 64), 18), random((64, 64), 19)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as own, \
            dag.Session(own, mode="interpret", task_overhead=0.002, stall_seconds=120) as session:
        gemm = session.load(EXAMPLES / "sgemm.phobos").sgemm.split((2, 1))
        C = session.zeros((64, 64))
        gemm(session.from_array(a), session.from_array(b), C, 1.0, 0.0)
        session.wait()
        for pid in own.run(os.getpid).values():
            os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        c = C.gather()
        assert time.monotonic() - started < 120
    expected = np.zeros((64, 64), np.float32)
    direct("sgemm", "interpret")(a, b, expected, 1.0, 0.0)
    assert np.array_equal(c, expected)


def test_a_wait_that_stalls_ends_with_an_error_within_its_bound(client):
    """A task that no worker can run (here: one pinned to a worker that does not exist) never finishes;
    waiting for it gives up after stall_seconds, saying so."""
    from phobos.dag.session import wait_for
    from phobos.dag.worker import noop
    stuck = client.submit(noop, pure=False, workers=["tcp://192.0.2.1:9"])
    started = time.monotonic()
    with pytest.raises(dag.DagError, match=r"waited 2 s for the stuck task without one of them finishing "
                                           r"\(1 of 1 not done, status pending; the cluster has 2 worker\(s\)\)"):
        wait_for([stuck], 2.0, "the stuck task")
    assert time.monotonic() - started < 10
    stuck.cancel()


@pytest.mark.gpu
def test_gpu_workers_compute_the_direct_call_bit_for_bit():
    M, K, N = 1024 + 64, 512, 2048
    a, b = random((M, K), 16), random((K, N), 17)
    config = {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32}
    with dag.Session(workers=2, mode="gpu", task_overhead=0.002) as session:
        gemm = session.load(EXAMPLES / "sgemm.phobos").sgemm.configure(**config).split((2, 2))
        C = session.zeros((M, N))
        gemm(session.from_array(a, blocks=(2, 1)), session.from_array(b, blocks=(1, 2)), C, 1.0, 0.0)
        got = C.gather()
        kinds = session.client.run(lambda dask_worker: {type(block).__name__ for blocks in dask_worker.data.values()
                                                        for block in blocks})
    expected = np.zeros((M, N), np.float32)
    direct("sgemm", "gpu").configure(**config)(a, b, expected, 1.0, 0.0)
    assert np.array_equal(got, expected)
    assert set().union(*kinds.values()) == {"DeviceBlock"}  # every block stays in GPU memory on its worker
