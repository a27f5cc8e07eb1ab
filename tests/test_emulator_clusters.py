# Thread-block clusters in the PTX emulator (sm_90a), with hand-written PTX that ptxas assembles:
# an exchange between two CTAs through distributed shared memory (mapa, ld/st.shared::cluster,
# generic addresses) ordered by barrier.cluster, the cluster special registers over 2x2 and 2x1x2
# clusters, atomics on a peer's shared memory, the GEMM producer/consumer protocol with a
# multicast TMA into two CTAs (each CTA's consumers wait on their own mbarrier and release the
# "empty" mbarriers of both producers), and what such kernels get wrong: a missing or relaxed
# barrier.cluster (a race), a CTA that exits while its peers use its shared memory, mbarriers used
# by peers before their initialisation is visible, deadlocks across the CTAs of a cluster, and
# launches the driver refuses.
import numpy as np
import pytest

from phobos.errors import LaunchError
from phobos.run.emulator import (AsyncCopyHazard, BarrierError, GlobalMemoryRace, MemoryFault, Module,
                                 PtxSyntaxError, SharedMemoryRace)
from phobos.run.tensor_map import TensorMap

from .emulator_support import PTXAS, ptxas_errors

rng = np.random.default_rng(90)
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas is not installed")

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"
CLUSTER_SYNC = "barrier.cluster.arrive.release.aligned;\n    barrier.cluster.wait.acquire.aligned;"
# after mbarrier.init by %lead: the initialisation made visible to the other CTAs of the cluster
PUBLISH_INIT = """\
    @%lead fence.mbarrier_init.release.cluster;
    barrier.cluster.arrive.relaxed.aligned;
    barrier.cluster.wait.aligned;
"""

# ------------------------------------------------------------------ distributed shared memory

EXCHANGE = HEADER + """\
.shared .align 16 .b32 buf[64];
.visible .entry exchange(.param .u64 out) .reqnctapercluster 2, 1, 1
{{
    .reg .pred %p;
    .reg .b32 %t, %r, %peer, %a, %b, %v, %u, %c;
    .reg .b64 %o, %w, %g;
    mov.u32 %t, %tid.x;
    mov.u32 %r, %cluster_ctarank;
    {start}
    xor.b32 %peer, %r, 1;
    mov.u32 %a, buf;
    shl.b32 %c, %t, 2;
    add.u32 %a, %a, %c;
    mapa.shared::cluster.u32 %b, %a, %peer;
    mad.lo.u32 %v, %r, 1000, %t;
    st.shared::cluster.u32 [%b], %v;        // buf[t] of the peer CTA
    {sync}
    ld.shared.u32 %v, [%a];                 // buf[t] of this CTA, which the peer wrote
    cvt.u64.u32 %g, %a;
    cvta.shared.u64 %g, %g;
    mapa.u64 %g, %g, %peer;
    ld.u32 %u, [%g];                        // the peer's buf[t] again, through a generic address
    {end}
    mov.u32 %c, %ctaid.x;
    mad.lo.u32 %c, %c, 64, %t;
    mul.wide.u32 %w, %c, 8;
    ld.param.u64 %o, [out];
    add.s64 %o, %o, %w;
    st.global.v2.u32 [%o], {{%v, %u}};
    ret;
}}
"""


def exchange(start="", sync=CLUSTER_SYNC, end=CLUSTER_SYNC):
    return EXCHANGE.format(start=start, sync=sync, end=end)


def run_exchange(text, ctas=4, **options):
    out = np.zeros((ctas * 64, 2), np.uint32)
    stats = Module(text, "exchange.ptx").launch("exchange", ctas, 64, [out], **options)
    return out, stats


def exchanged(ctas=4):
    rank = np.repeat(np.arange(ctas) % 2, 64)
    t = np.tile(np.arange(64), ctas)
    return np.stack([(rank ^ 1) * 1000 + t, rank * 1000 + t], axis=1).astype(np.uint32)


def test_two_ctas_exchange_through_distributed_shared_memory():
    out, stats = run_exchange(exchange(), workers=1)  # (in one process: the batches of one)
    np.testing.assert_array_equal(out, exchanged())
    assert stats.batches == 1


def test_a_batch_never_splits_a_cluster():
    out, stats = run_exchange(exchange(), max_threads=64)    # one CTA of 64 threads would fit
    np.testing.assert_array_equal(out, exchanged())
    assert stats.batches == 2


def test_a_fenced_relaxed_arrival_orders_like_a_release():
    fenced = "fence.acq_rel.cluster;\n    barrier.cluster.arrive.relaxed.aligned;\n    barrier.cluster.wait.aligned;"
    np.testing.assert_array_equal(run_exchange(exchange(sync=fenced))[0], exchanged())


@pytest.mark.parametrize("sync, end", [
    ("", CLUSTER_SYNC), ("bar.sync 0;", CLUSTER_SYNC),
    ("barrier.cluster.arrive.relaxed.aligned;\n    barrier.cluster.wait.aligned;", CLUSTER_SYNC),
    ("barrier.cluster.arrive.aligned;", "barrier.cluster.wait.aligned;"),
], ids=["nothing", "bar.sync", "relaxed arrival", "read before the wait"])
def test_a_missing_cluster_barrier_is_a_race(sync, end):
    with pytest.raises(SharedMemoryRace, match=r"read by this thread conflicts with a write by thread \(0,0,0\) of "
                                               r"CTA \(1,0,0\) \(cluster rank 1\) .* in another CTA, with no "
                                               r"barrier.cluster in between"):
        run_exchange(exchange(sync=sync, end=end))


def test_exiting_while_a_peer_reads_the_shared_memory_is_reported():
    with pytest.raises(SharedMemoryRace, match=r"CTA \(0,0,0\) \(cluster rank 0\) exits, but its shared memory was "
                                               r"accessed by thread \(0,0,0\) of CTA \(1,0,0\) .* barrier.cluster"):
        run_exchange(exchange(end=""))


def test_a_peer_that_has_exited_has_no_shared_memory():
    with pytest.raises(MemoryFault, match=r"in the shared memory of CTA \(1,0,0\) \(cluster rank 1\), which has "
                                          r"exited"):
        run_exchange(exchange(start="setp.eq.u32 %p, %r, 1;\n    @%p exit;"))


def test_addresses_outside_the_cluster_are_faults():
    with pytest.raises(MemoryFault, match="mapa to CTA rank 3, outside the cluster of 2 CTAs"):
        run_exchange(exchange(start="add.u32 %r, %r, 2;"))           # rank 0 maps to rank 2 ^ 1
    with pytest.raises(MemoryFault, match=r"shared::cta access at 0x1000000, an address of the CTA of cluster rank "
                                          r"1: another CTA's shared memory \(from mapa\) is reached with "
                                          r"\.shared::cluster"):
        run_exchange(EXCHANGE.replace("st.shared::cluster.u32", "st.shared.u32").format(start="", sync=CLUSTER_SYNC,
                                                                                          end=CLUSTER_SYNC))


ATOMICS = HEADER + """\
.shared .align 4 .u32 counter;
.visible .entry count(.param .u64 out) .reqnctapercluster 4, 1, 1
{{
    .reg .pred %lead;
    .reg .b32 %t, %a, %b, %v;
    .reg .b64 %o, %w;
    mov.u32 %t, %tid.x;
    setp.eq.u32 %lead, %t, 0;
    mov.u32 %a, counter;
    @%lead st.shared.u32 [%a], 0;
    {sync}
    mapa.shared::cluster.u32 %b, %a, 0;
    atom.shared::cluster.add.u32 %v, [%b], 1;       // every thread of the cluster counts on rank 0
    red.shared::cluster.add.u32 [%b], 2;
    """ + CLUSTER_SYNC + """
    ld.shared.u32 %v, [%a];
    getctarank.shared::cluster.u32 %t, %b;
    add.u32 %v, %v, %t;                             // + 0, the rank %b is in
    mov.u32 %t, %ctaid.x;
    mul.wide.u32 %w, %t, 4;
    ld.param.u64 %o, [out];
    add.s64 %o, %o, %w;
    @%lead st.global.u32 [%o], %v;
    ret;
}}
"""


def test_atomics_on_a_peers_shared_memory():
    out = np.zeros(8, np.uint32)
    Module(ATOMICS.format(sync=CLUSTER_SYNC), "count.ptx").launch("count", 8, 64, [out])
    np.testing.assert_array_equal(out, np.where(np.arange(8) % 4 == 0, 3 * 4 * 64, 0))
    with pytest.raises(SharedMemoryRace, match="atomic by this thread conflicts with a write"):
        Module(ATOMICS.format(sync=""), "count.ptx").launch("count", 8, 64, [out])


PUBLISH = HEADER + """\
.visible .entry publish(.param .u64 data, .param .u64 out) .reqnctapercluster 2, 1, 1
{{
    .reg .pred %p;
    .reg .b32 %t, %r, %v;
    .reg .b64 %d, %o, %w;
    mov.u32 %t, %tid.x;
    mov.u32 %r, %cluster_ctarank;
    setp.eq.u32 %p, %r, 0;
    mul.wide.u32 %w, %t, 4;
    ld.param.u64 %d, [data];
    add.s64 %d, %d, %w;
    add.u32 %v, %t, 7;
    @%p st.global.u32 [%d], %v;                     // rank 0 writes global memory
    {sync}
    @!%p ld.global.u32 %v, [%d];                    // rank 1 reads it
    ld.param.u64 %o, [out];
    add.s64 %o, %o, %w;
    @!%p st.global.u32 [%o], %v;
    ret;
}}
"""


def test_a_cluster_barrier_orders_global_memory_between_its_ctas():
    data, out = np.zeros(64, np.uint32), np.zeros(64, np.uint32)
    Module(PUBLISH.format(sync=CLUSTER_SYNC), "publish.ptx").launch("publish", 2, 64, [data, out])
    np.testing.assert_array_equal(out, np.arange(64) + 7)
    with pytest.raises(GlobalMemoryRace, match=r"read by this thread conflicts with a write by thread \(0,0,0\) of "
                                               r"CTA \(0,0,0\) \(cluster rank 0\) .* in another CTA of the "
                                               r"cluster, with no barrier.cluster in between"):
        Module(PUBLISH.format(sync=""), "publish.ptx").launch("publish", 2, 64, [data, out])


# ------------------------------------------------------------------ special registers

REGISTERS = [f"%ctaid.{a}" for a in "xyz"] + [f"%{base}.{a}" for base in ("clusterid", "nclusterid", "cluster_ctaid",
                                                                          "cluster_nctaid") for a in "xyz"] \
    + ["%cluster_ctarank", "%cluster_nctarank"]
SPECIAL = HEADER + """\
.shared .align 4 .b32 word;
.visible .entry registers(.param .u64 out){directive}
{{
    .reg .pred %p;
    .reg .b32 %v, %c, %x, %y;
    .reg .b64 %o, %w;
    mov.u32 %c, %ctaid.z;
    mov.u32 %x, %nctaid.y;
    mov.u32 %y, %ctaid.y;
    mad.lo.u32 %c, %c, %x, %y;
    mov.u32 %x, %nctaid.x;
    mov.u32 %y, %ctaid.x;
    mad.lo.u32 %c, %c, %x, %y;                      // the linear CTA index
    mul.wide.u32 %w, %c, {stride};
    ld.param.u64 %o, [out];
    add.s64 %o, %o, %w;
{stores}
    mov.pred %p, %is_explicit_cluster;
    selp.u32 %v, 1, 0, %p;
    st.global.u32 [%o+{explicit}], %v;
    mov.u32 %x, word;
    mapa.shared::cluster.u32 %x, %x, 0;
    getctarank.shared::cluster.u32 %v, %x;
    st.global.u32 [%o+{rank0}], %v;                 // 0: the CTA mapa named
    barrier.cluster.arrive.aligned;                 // (a cluster of one CTA without clusters)
    barrier.cluster.wait.aligned;
    ret;
}}
"""
WORDS = len(REGISTERS) + 2


def special(directive=""):
    stores = "\n".join(f"    mov.u32 %v, {name};\n    st.global.u32 [%o+{4 * k}], %v;"
                       for k, name in enumerate(REGISTERS))
    return SPECIAL.format(directive=directive, stride=4 * WORDS, stores=stores, explicit=4 * len(REGISTERS),
                          rank0=4 * len(REGISTERS) + 4)


def expected_registers(grid, dims, explicit):
    rows = []
    for z in range(grid[2]):
        for y in range(grid[1]):
            for x in range(grid[0]):
                xyz = (x, y, z)
                values = list(xyz) + [v // d for v, d in zip(xyz, dims)] + [g // d for g, d in zip(grid, dims)] \
                    + [v % d for v, d in zip(xyz, dims)] + list(dims)
                local = [v % d for v, d in zip(xyz, dims)]
                values += [local[0] + dims[0] * (local[1] + dims[1] * local[2]), int(np.prod(dims)), explicit, 0]
                rows.append(values)
    return np.array(rows, np.uint32)


@pytest.mark.parametrize("grid, dims", [((4, 4, 1), (2, 2, 1)), ((4, 2, 2), (2, 1, 2))])
def test_cluster_special_registers(grid, dims):
    directive = f" .reqnctapercluster {dims[0]}, {dims[1]}, {dims[2]}"
    ctas = int(np.prod(grid))
    out = np.zeros((ctas, WORDS), np.uint32)
    stats = Module(special(directive), "regs.ptx").launch("registers", grid, 1, [out], max_threads=1)
    np.testing.assert_array_equal(out, expected_registers(grid, dims, 1))
    assert stats.batches == ctas // int(np.prod(dims))           # one cluster at a time
    Module(special(), "regs.ptx").launch("registers", grid, 1, [out], cluster=dims)    # given at launch
    np.testing.assert_array_equal(out, expected_registers(grid, dims, 1))


def test_a_launch_without_clusters_is_a_cluster_of_one_cta():
    out = np.zeros((8, WORDS), np.uint32)
    Module(special(), "regs.ptx").launch("registers", (4, 2), 1, [out])
    np.testing.assert_array_equal(out, expected_registers((4, 2, 1), (1, 1, 1), 0))


def test_launches_the_driver_refuses():
    two = Module(special(" .reqnctapercluster 2, 1, 1"), "regs.ptx")
    out = np.zeros((8, WORDS), np.uint32)
    with pytest.raises(LaunchError, match=r"grid \(3, 1, 1\) is not a whole number of clusters of \(2, 1, 1\) CTAs"):
        two.launch("registers", 3, 32, [out])
    with pytest.raises(LaunchError, match=r"requires clusters of \(2, 1, 1\) CTAs \(.reqnctapercluster\), launched "
                                          r"with cluster=\(4, 1, 1\)"):
        two.launch("registers", 4, 32, [out], cluster=4)
    with pytest.raises(LaunchError, match="is marked .explicitcluster: launch it with cluster="):
        Module(special(" .explicitcluster"), "regs.ptx").launch("registers", 4, 32, [out])
    with pytest.raises(LaunchError, match=r"allows at most 2 CTAs per cluster \(.maxclusterrank\)"):
        Module(special(" .maxclusterrank 2"), "regs.ptx").launch("registers", 4, 32, [out], cluster=(4, 1))
    with pytest.raises(LaunchError, match="at most 8 CTAs make a portable cluster"):
        Module(special(), "regs.ptx").launch("registers", 16, 32, [np.zeros((16, WORDS), np.uint32)], cluster=16)
    with pytest.raises(PtxSyntaxError, match=".reqnctapercluster and .maxclusterrank cannot both be specified"):
        Module(special(" .reqnctapercluster 2, 1, 1 .maxclusterrank 2"), "regs.ptx")


# ------------------------------------------------------------------ barrier.cluster

HANDOFF = HEADER + """\
.shared .align 8 .b64 flag;
.visible .entry handoff() .reqnctapercluster 2, 1, 1
{{
    .reg .pred %p, %q, %lead;
    .reg .b32 %t, %r, %a, %b;
    mov.u32 %t, %tid.x;
    mov.u32 %r, %cluster_ctarank;
    mov.u32 %a, flag;
    setp.eq.u32 %lead, %t, 0;
    @%lead mbarrier.init.shared::cta.b64 [%a], 1;
""" + PUBLISH_INIT + """    setp.eq.u32 %p, %r, 1;
    @%p bra RANK1;
    """ + CLUSTER_SYNC + """
    mapa.shared::cluster.u32 %b, %a, 1;
    @%lead mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%b];   // rank 1 may go on
    bra.uni DONE;
RANK1:
    {rank1}
DONE:
    """ + CLUSTER_SYNC + """                               // rank 1's flag is signalled before it exits
    ret;
}}
"""
WAIT_FLAG = """WAIT:
    mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %q, [%a], 0;
    @!%q bra WAIT;"""


HANDOFFS = {
    "handoff": HANDOFF.format(rank1=CLUSTER_SYNC + "\n" + WAIT_FLAG),
    "deadlock": HANDOFF.format(rank1=WAIT_FLAG + "\n    " + CLUSTER_SYNC),   # waits for the flag before the barrier
    "direct": HANDOFF.format(rank1=WAIT_FLAG).replace("@%p bra RANK1;\n    " + CLUSTER_SYNC, "@%p bra RANK1;"),
}
HANDOFFS.update({
    "split": HANDOFFS["handoff"].replace("    barrier.cluster.arrive.relaxed.aligned;",
                                         "    @%lead barrier.cluster.arrive.relaxed.aligned;"),
    "twice": HANDOFFS["handoff"].replace(CLUSTER_SYNC + "\n    mapa",                    # rank 0 arrives twice
                                         CLUSTER_SYNC.replace("wait.acquire", "arrive.release") + "\n    mapa"),
    "unpublished": HANDOFFS["direct"].replace("    @%lead fence.mbarrier_init.release.cluster;\n", ""),
    "unannounced": HANDOFFS["handoff"].replace("    barrier.cluster.arrive.relaxed.aligned;\n", ""),
})


def run_handoff(name):
    Module(HANDOFFS[name], "handoff.ptx").launch("handoff", 4, 64, [])


def test_a_cluster_barrier_then_a_remote_mbarrier_arrival():
    run_handoff("handoff")
    run_handoff("direct")   # the relaxed arrival after fence.mbarrier_init makes the flag's initialisation visible


def test_deadlock_across_a_cluster():
    with pytest.raises(BarrierError, match=r"deadlock: 64 threads wait in barrier.cluster.wait \(and 64 in other "
                                           r"clusters\) for 64 threads of CTA "
                                           r"\(1,0,0\) \(cluster rank 1\) that have not arrived \(they are at "
                                           r"handoff.ptx:\d+ `mbarrier.try_wait.* 128 threads wait for mbarrier "
                                           r"phases"):
        run_handoff("deadlock")


@pytest.mark.parametrize("name, message", [
    ("split", "barrier.cluster.arrive.relaxed.aligned executed by part of a warp: lane 1 has not exited and is "
              "elsewhere"),
    ("twice", "barrier.cluster.arrive by a thread that already arrived at this phase"),
    ("unpublished", r"mbarrier.arrive on the mbarrier at flag\+0 .* of CTA \(1,0,0\) .* before its "
                    r"initialisation .* was made visible to the cluster"),
    ("unannounced", "deadlock: 128 threads wait in barrier.cluster.wait without having arrived"),
])
def test_misused_cluster_barriers(name, message):
    with pytest.raises(BarrierError, match=message):
        run_handoff(name)


# ------------------------------------------------------------------ multicast TMA: the GEMM protocol

PIPELINE = HEADER + """\
.shared .align 8 .b64 full[2];
.shared .align 8 .b64 empty[2];
.shared .align 128 .b8 stage_a[512];
.shared .align 128 .b8 stage_b[512];
// Two CTAs of a cluster each take a row of A per k step and share a row of B: each CTA's producer (thread 0)
// copies its A row into its own stage and its half of the B row into the stage of both CTAs (multicast);
// full[s] of each CTA expects 1 arrival and 512 bytes.  Its 64 consumers wait on their own full[s] and
// release the stage in both CTAs (empty[s] of each CTA expects 2 x 64 arrivals), since both producers write
// into it.  out[cta][i] = sum over k of A[cta * K + k][i] * B[cluster * K + k][i] (mod 2^32).
.visible .entry pipeline(.param .align 64 .b8 amap[128], .param .align 64 .b8 bmap[128], .param .u64 out,
                         .param .u32 k_tiles)
.reqntid 96, 1, 1
.reqnctapercluster 2, 1, 1
{{
    .reg .pred %p, %q, %lead;
    .reg .b32 %t, %r, %k, %n, %s, %ph, %x, %y, %full, %empty, %sa, %sb, %fs, %es, %da, %db, %i, %a, %b, %acc;
    .reg .b32 %off, %peer;
    .reg .b64 %am, %bm, %o, %w;
    .reg .b16 %mask;
    mov.u32 %t, %tid.x;
    mov.u32 %r, %cluster_ctarank;
    ld.param.u32 %n, [k_tiles];
    mov.u32 %full, full;
    mov.u32 %empty, empty;
    mov.u32 %sa, stage_a;
    mov.u32 %sb, stage_b;
    setp.eq.u32 %lead, %t, 0;
    @%lead mbarrier.init.shared::cta.b64 [%full], 1;
    @%lead mbarrier.init.shared::cta.b64 [%full+8], 1;
    @%lead mbarrier.init.shared::cta.b64 [%empty], 128;
    @%lead mbarrier.init.shared::cta.b64 [%empty+8], 128;
""" + PUBLISH_INIT + """    setp.ge.u32 %p, %t, 32;
    @%p bra CONSUMER;
    @!%lead bra DONE;
    mov.b64 %am, amap;
    cvta.param.u64 %am, %am;
    mov.b64 %bm, bmap;
    cvta.param.u64 %bm, %bm;
    mov.b16 %mask, 3;
    mov.u32 %k, 0;
PRODUCE:
    and.b32 %s, %k, 1;
    bfe.u32 %ph, %k, 1, 1;
    xor.b32 %ph, %ph, 1;                            // the parity of the stage's previous use
    shl.b32 %off, %s, 3;
    add.u32 %es, %empty, %off;
    add.u32 %fs, %full, %off;
WAIT_EMPTY:
    mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %q, [%es], %ph;
    @!%q bra WAIT_EMPTY;
    mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%fs], 512;
    shl.b32 %off, %s, 8;
    add.u32 %da, %sa, %off;
    add.u32 %db, %sb, %off;
    shl.b32 %x, %r, 7;
    add.u32 %db, %db, %x;                           // this CTA's half of the B row
    mov.u32 %y, %ctaid.x;
    mad.lo.u32 %y, %y, %n, %k;
    mov.u32 %x, 0;
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%da], [%am, {{%x, %y}}], [%fs];
    mov.u32 %y, %clusterid.x;
    mad.lo.u32 %y, %y, %n, %k;
    shl.b32 %x, %r, 5;
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster
        [%db], [%bm, {{%x, %y}}], [%fs], %mask;
    add.u32 %k, %k, 1;
    setp.lt.u32 %q, %k, %n;
    @%q bra PRODUCE;
{tail}    bra DONE;
CONSUMER:
    sub.u32 %i, %t, 32;
    shl.b32 %i, %i, 2;
    mov.u32 %acc, 0;
    mov.u32 %k, 0;
CONSUME:
    and.b32 %s, %k, 1;
    bfe.u32 %ph, %k, 1, 1;
    shl.b32 %off, %s, 3;
    add.u32 %fs, %full, %off;
    add.u32 %es, %empty, %off;
{wait_full}{early}    shl.b32 %off, %s, 8;
    add.u32 %off, %off, %i;
    add.u32 %a, %sa, %off;
    ld.shared.u32 %a, [%a];
    add.u32 %b, %sb, %off;
    ld.shared.u32 %b, [%b];
    mad.lo.u32 %acc, %a, %b, %acc;
{release}    add.u32 %k, %k, 1;
    setp.lt.u32 %q, %k, %n;
    @%q bra CONSUME;
    mov.u32 %x, %ctaid.x;
    sub.u32 %y, %t, 32;
    mad.lo.u32 %x, %x, 64, %y;
    mul.wide.u32 %w, %x, 4;
    ld.param.u64 %o, [out];
    add.s64 %o, %o, %w;
    st.global.u32 [%o], %acc;
DONE:
{end}    ret;
}}
"""
WAIT_FULL = """WAIT_FULL:
    mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 %q, [%fs], %ph;
    @!%q bra WAIT_FULL;
"""
RELEASE_BOTH = """    mapa.shared::cluster.u32 %peer, %es, 0;
    mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%peer];
    mapa.shared::cluster.u32 %peer, %es, 1;
    mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%peer];
"""
RELEASE_OWN = "    mbarrier.arrive.release.cta.shared::cta.b64 _, [%es];\n"
END_SYNC = "    barrier.cluster.arrive;\n    barrier.cluster.wait;\n"    # not .aligned: warp 0 diverged
PRODUCER_TAIL = """TAIL:                                       // until both CTAs' consumers released every stage
    and.b32 %s, %k, 1;
    bfe.u32 %ph, %k, 1, 1;
    xor.b32 %ph, %ph, 1;
    shl.b32 %off, %s, 3;
    add.u32 %es, %empty, %off;
WAIT_TAIL:
    mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %q, [%es], %ph;
    @!%q bra WAIT_TAIL;
    add.u32 %k, %k, 1;
    add.u32 %x, %n, 2;
    setp.lt.u32 %q, %k, %x;
    @%q bra TAIL;
"""
K_TILES = 5


def pipeline(tail="", wait_full=WAIT_FULL, early="", release=RELEASE_BOTH, end=END_SYNC):
    return PIPELINE.format(tail=tail, wait_full=wait_full, early=early, release=release, end=end)


def run_pipeline(text, clusters=2):
    ctas = 2 * clusters
    a = rng.integers(0, 1 << 32, (ctas * K_TILES, 64), dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 1 << 32, (clusters * K_TILES, 64), dtype=np.uint64).astype(np.uint32)
    out = np.zeros((ctas, 64), np.uint32)
    maps = [TensorMap.tiled(a, (1, 64), swizzle="none"), TensorMap.tiled(b, (1, 32), swizzle="none")]
    Module(text, "pipeline.ptx").launch("pipeline", ctas, 96, [*maps, out, K_TILES])
    want = np.zeros((ctas, 64), np.uint64)
    for cta in range(ctas):
        for k in range(K_TILES):
            want[cta] += a[cta * K_TILES + k].astype(np.uint64) * b[cta // 2 * K_TILES + k]
    np.testing.assert_array_equal(out, (want % (1 << 32)).astype(np.uint32))


@pytest.mark.parametrize("ending", ["cluster barrier", "producer tail"])
def test_multicast_tma_feeds_both_ctas_of_the_cluster(ending):
    run_pipeline(pipeline() if ending == "cluster barrier" else pipeline(tail=PRODUCER_TAIL, end=""))


PIPELINE_MISTAKES = {
    "consumers release before reading": (
        dict(early=RELEASE_BOTH, release=""), AsyncCopyHazard,
        r"shared read at stage_a\+0 .* of CTA \(0,0,0\) .* written by a bulk tensor copy, before this thread "
        r"waited for the completion of its mbarrier phase 1"),
    "consumers read before waiting": (
        dict(wait_full=""), AsyncCopyHazard, "before this thread waited for the completion of its mbarrier phase 0"),
    "consumers release only their own CTA's stage": (
        dict(release=RELEASE_OWN), BarrierError, r"deadlock: .* wait for mbarrier phases"),
    "no fence.mbarrier_init before the relaxed arrival": (
        dict(), BarrierError, r"a bulk tensor copy signals the mbarrier at full\+0 .* of CTA \(1,0,0\) .* before its "
                              r"initialisation .* was made visible to the cluster"),
    "exit while the peer still releases the stages": (
        dict(end=""), SharedMemoryRace, r"exits, but its mbarrier at empty\+\d+ .* was signalled by thread \(\d+,0,0\) "
                                        r"of CTA \(1,0,0\)"),
}


def mistake(name):
    changes, _, _ = PIPELINE_MISTAKES[name]
    text = pipeline(**changes)
    if name.startswith("no fence"):
        text = text.replace("    @%lead fence.mbarrier_init.release.cluster;\n", "")
    return text


@pytest.mark.parametrize("name", PIPELINE_MISTAKES)
def test_pipeline_mistakes_are_reported(name):
    _, error, message = PIPELINE_MISTAKES[name]
    with pytest.raises(error, match=message):
        run_pipeline(mistake(name), clusters=1)


PEER_COPY = HEADER + """\
.shared .align 8 .b64 bar;
.shared .align 128 .b8 box[256];
.visible .entry peer_copy(.param .align 64 .b8 map[128], .param .u64 out) .reqnctapercluster 2, 1, 1
{{
    .reg .pred %p, %q, %lead;
    .reg .b32 %t, %r, %a, %b, %dst, %mb, %x, %v;
    .reg .b64 %m, %o, %w;
    mov.u32 %t, %tid.x;
    mov.u32 %r, %cluster_ctarank;
    mov.u32 %a, box;
    mov.u32 %b, bar;
    setp.eq.u32 %lead, %t, 0;
    @%lead mbarrier.init.shared::cta.b64 [%b], 1;
""" + PUBLISH_INIT + """    setp.eq.u32 %p, %r, 1;
    @%p bra READ;
    @!%lead bra DONE;
    mapa.shared::cluster.u32 %dst, %a, 1;           // rank 0 copies a box into rank 1's shared memory
    mapa.shared::cluster.u32 %mb, %b, {bar_rank};
    mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%mb], 256;
    mov.b64 %m, map;
    cvta.param.u64 %m, %m;
    mov.u32 %x, 0;
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%dst], [%m, {{%x, %x}}], [%mb];
    bra DONE;
READ:
    mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %q, [%b], 0;
    @!%q bra READ;
    shl.b32 %x, %t, 2;
    add.u32 %x, %a, %x;
    ld.shared.u32 %v, [%x];
    mul.wide.u32 %w, %t, 4;
    ld.param.u64 %o, [out];
    add.s64 %o, %o, %w;
    st.global.u32 [%o], %v;
DONE:
    barrier.cluster.arrive;
    barrier.cluster.wait;
    ret;
}}
"""


def test_a_tma_copy_into_a_peers_shared_memory():
    src = rng.integers(0, 1 << 32, (4, 16), dtype=np.uint64).astype(np.uint32)
    out = np.zeros(64, np.uint32)
    Module(PEER_COPY.format(bar_rank=1), "copy.ptx").launch("peer_copy", 2, 64,
                                                            [TensorMap.tiled(src, (4, 16), swizzle="none"), out])
    np.testing.assert_array_equal(out, src.ravel())
    with pytest.raises(MemoryFault, match=r"bulk tensor copy into the shared memory of CTA \(1,0,0\) \(cluster "
                                          r"rank 1\) signalling the mbarrier at bar\+0 .* of CTA \(0,0,0\) .* must be "
                                          r"in the CTA written to"):
        Module(PEER_COPY.format(bar_rank=0), "copy.ptx").launch("peer_copy", 2, 64,
                                                                [TensorMap.tiled(src, (4, 16), swizzle="none"), out])


# ------------------------------------------------------------------ every kernel is real PTX

KERNELS = {
    "exchange": exchange(),
    "exchange, fenced relaxed arrival": exchange(
        sync="fence.acq_rel.cluster;\n    barrier.cluster.arrive.relaxed.aligned;\n    barrier.cluster.wait.aligned;"),
    "exchange, no barrier": exchange(sync="", end=""),
    "exchange, split barrier": exchange(sync="barrier.cluster.arrive.aligned;", end="barrier.cluster.wait.aligned;"),
    "exchange, exit": exchange(start="setp.eq.u32 %p, %r, 1;\n    @%p exit;"),
    "atomics": ATOMICS.format(sync=CLUSTER_SYNC), "registers": special(" .reqnctapercluster 2, 2, 1"),
    "registers, explicit": special(" .explicitcluster .maxclusterrank 4"),
    **{f"handoff, {name}": text for name, text in HANDOFFS.items()},
    "publish": PUBLISH.format(sync=CLUSTER_SYNC),
    "peer copy": PEER_COPY.format(bar_rank=1), "peer copy, own mbarrier": PEER_COPY.format(bar_rank=0),
    "pipeline": pipeline(), "pipeline, producer tail": pipeline(tail=PRODUCER_TAIL, end=""),
    **{f"pipeline, {name}": mistake(name) for name in PIPELINE_MISTAKES},
}


@needs_ptxas
@pytest.mark.parametrize("name", KERNELS)
def test_every_kernel_assembles(name):
    assert ptxas_errors(KERNELS[name], "sm_90a") is None
