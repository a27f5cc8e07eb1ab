# The CLUSTER knob: a program instance run by a cluster of CTAs (sm_90), each with its cluster_rank(),
# which combine scalars with cluster_sum, cluster_max and cluster_min through distributed shared memory.
# In the emulator (which checks the cluster's barriers and accesses to peers' shared memory): the
# combined values against NumPy, the same bits in every CTA, program_id and num_programs those of the
# program instances; the interpreter (one CTA an instance) and targets before sm_90 refuse clusters;
# ptxas accepts the PTX; the checker locates misuse.
import numpy as np
import pytest

import phobos
from phobos.errors import LaunchError, PhobosError, ResourceError, SemanticError
from phobos.ptxcheck import check

from .emulator_support import PTXAS

needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas is not installed")

COMBINE = """
@autotune(CLUSTER in [1, 2, 4, 8], WARPS in [2])
kernel combine(x: tensor<f32>[P, R], k: tensor<i32>[P, R], s: tensor<f32>[P, 8], hi: tensor<f32>[P, 8],
               lo: tensor<f32>[P, 8], n: tensor<i32>[P, 8], ids: tensor<i32>[P, 8, 3]) {
    let p = program_id(0)
    let r = cluster_rank()
    let mine = x[p, r * 16 :+ 16]
    s[p, r] = cluster_sum(sum(mine))
    hi[p, r] = cluster_max(max(mine))
    lo[p, r] = cluster_min(min(mine))
    n[p, r] = cluster_sum(sum(k[p, r * 16 :+ 16]))
    ids[p, r, 0] = p
    ids[p, r, 1] = num_programs(0)
    ids[p, r, 2] = r
}
"""


@pytest.mark.parametrize("cluster", [1, 2, 4, 8])
def test_cluster_reductions_in_the_emulator(cluster):
    programs = 3
    rng = np.random.default_rng(cluster)
    x = rng.standard_normal((programs, 16 * cluster)).astype(np.float32) * 3
    k = rng.integers(-1000, 1000, (programs, 16 * cluster)).astype(np.int32)
    outs = [np.full((programs, 8), np.nan, np.float32) for _ in range(3)]
    n = np.zeros((programs, 8), np.int32)
    ids = np.full((programs, 8, 3), -1, np.int32)
    fn = phobos.jit(COMBINE, mode="emulate").combine.configure(CLUSTER=cluster)
    fn[(programs,)](x, k, *outs, n, ids)
    s, hi, lo = (o[:, :cluster] for o in outs)
    for got in (s, hi, lo, n[:, :cluster]):  # every CTA of a cluster has the same bits
        assert (got == got[:, :1]).all()
    np.testing.assert_allclose(s[:, 0], x.sum(1, dtype=np.float64), rtol=1e-5, atol=1e-4)
    assert (hi[:, 0] == x.max(1)).all() and (lo[:, 0] == x.min(1)).all()
    assert (n[:, 0] == k.sum(1)).all()
    assert (ids[:, :cluster, 0] == np.arange(programs)[:, None]).all()
    assert (ids[:, :cluster, 1] == programs).all()
    assert (ids[:, :cluster, 2] == np.arange(cluster)[None, :]).all()
    assert np.isnan(outs[0][:, cluster:]).all()  # no CTA beyond the cluster's


def test_the_interpreter_runs_clusters_of_one_cta():
    mod = phobos.jit(COMBINE, mode="interpret")
    x = np.arange(32, dtype=np.float32).reshape(1, 32)
    args = [np.zeros((1, 8), np.float32) for _ in range(3)]
    n, ids = np.zeros((1, 8), np.int32), np.zeros((1, 8, 3), np.int32)
    mod.combine.configure(CLUSTER=1)[(1,)](x[:, :16], np.ones((1, 16), np.int32), *args, n, ids)
    assert args[0][0, 0] == x[0, :16].sum() and n[0, 0] == 16
    with pytest.raises(LaunchError, match="not a cluster of CLUSTER=2"):
        mod.combine.configure(CLUSTER=2)[(1,)](x, np.ones((1, 32), np.int32), *args, n, ids)


def test_clusters_need_sm_90():
    with pytest.raises(ResourceError, match="sm_90 and newer have; this target is sm_80") as info:
        phobos.compile(COMBINE, config={"CLUSTER": 2, "WARPS": 2}, arch="sm_80")
    assert info.value.loc is not None and info.value.loc.line == 6  # the first cluster builtin
    ptx = phobos.compile(COMBINE, config={"CLUSTER": 1, "WARPS": 2}, arch="sm_75").ptx
    assert "barrier.cluster" not in ptx and "mapa" not in ptx  # CLUSTER=1: plain CTAs, no cluster code


@needs_ptxas
@pytest.mark.parametrize("arch, cluster", [("sm_75", 1), ("sm_90", 1), ("sm_90", 4), ("sm_90", 8)])
def test_ptxas_accepts_the_cluster_code(arch, cluster):
    compiled = phobos.compile(COMBINE, config={"CLUSTER": cluster, "WARPS": 2}, arch=arch)
    assert (f".reqnctapercluster {cluster}, 1, 1" in compiled.ptx) == (cluster > 1)
    report = check(compiled.ptx, arch)
    assert report.ok, report.errors


@pytest.mark.parametrize("body, message", [
    ("let t = cluster_sum(x[0, 0 :+ 16])", "combines a scalar over the cluster, not a tile"),
    ("let t = cluster_max(x[0, 0] > 0.0)", "works on f32, f64, i32, u32, i64, u64, not bool"),
    ("let t = cluster_rank(1)", "takes 0 arguments"),
])
def test_misuse_is_located(body, message):
    src = f"kernel k(x: tensor<f32>[M, N]) {{\n    {body}\n}}\n"
    with pytest.raises(PhobosError, match=message) as info:
        phobos.jit(src)
    assert info.value.loc.line == 2


REACHED_BY_SOME = {
    "if": "    if cluster_rank() == 0 {\n        y[0 :+ 1] = full([1], cluster_sum(x[0, 0]))\n    }",
    "for": "    var a = 0.0\n    for c in range(cluster_rank(), N, 2) {\n        a = a + cluster_max(x[0, c])\n    }\n"
           "    y[0 :+ 1] = full([1], a)",
    "while": "    var r = cluster_rank() * 2\n    while r < N {\n        y[0 :+ 1] = full([1], cluster_min(x[0, r]))\n"
             "        r = r + 4\n    }",
}


@pytest.mark.parametrize("mode", ["interpret", "emulate"])
@pytest.mark.parametrize("construct", sorted(REACHED_BY_SOME))
def test_a_cluster_reduction_some_ctas_may_not_reach_is_refused_in_every_mode(construct, mode):
    """Inside an if, a for or a while that depends on cluster_rank(), a cluster reduction would leave the
    other CTAs of the cluster waiting at its barrier (a hang on the GPU): with CLUSTER=2 every mode refuses
    it, located; with clusters of one CTA (cluster_rank() is 0) the kernel runs."""
    body = f"kernel k(x: tensor<f32>[M, N], y: tensor<f32>[M]) {{\n{REACHED_BY_SOME[construct]}\n}}\n"
    x, y = np.ones((2, 8), np.float32), np.zeros(2, np.float32)
    with pytest.raises(SemanticError, match="every CTA of the cluster must reach it") as info:
        phobos.kernel("@autotune(CLUSTER in [2])\n" + body, mode=mode)[(1,)](x, y)
    lines = body.splitlines()
    at = next(i for i, line in enumerate(lines, 1) if any(f"cluster_{k}(" in line for k in ("sum", "max", "min")))
    assert info.value.loc.line == at + 1
    phobos.kernel(body, mode=mode)[(1,)](x, y)


def test_cluster_knob_values():
    with pytest.raises(PhobosError, match="CLUSTER must be 1, 2, 4 or 8, got 3"):
        phobos.jit("@autotune(CLUSTER in [1, 3])\nkernel k(x: tensor<f32>[N]) {\n    x[0] = 1.0\n}\n")
