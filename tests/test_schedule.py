"""The schedule model of pipelined K loops (phobos/lower/schedule.py): its rules one at a time, the
schedules the compiler plans for the examples, and the dump that shows them."""
from dataclasses import replace
from pathlib import Path

import pytest

from phobos.compiler import Dumps, compile_kernel, parse_source, pick_kernel
from phobos.lower.schedule import Schedule, StageBarrier, TileOrder, Warps

ROOT = Path(__file__).resolve().parent.parent

TMA = Schedule(
    "tma", 4, 49152,
    (Warps("consumers", 256, registers=232), Warps("producer", 128, copiers=1, registers=40)),
    (StageBarrier("full", 1, "producer", "consumers", 49152), StageBarrier("empty", 2, "consumers", "producer")),
    ahead=4, in_flight=1, order=TileOrder(8, persistent=True), entry_registers=168)
CP_ASYNC = Schedule("cp.async", 3, 32768, (Warps("all", 256, copiers=256),), ahead=1, in_flight=1)


def test_sound_schedules_have_no_problems():
    assert TMA.problems() == []
    assert CP_ASYNC.problems() == []
    assert TMA.specialized and not CP_ASYNC.specialized
    assert TMA.threads == 384 and TMA.computing.role == "consumers" and CP_ASYNC.computing.role == "all"


@pytest.mark.parametrize("broken, says", [
    (replace(CP_ASYNC, stages=1), "a ring needs 2 at least"),
    (replace(CP_ASYNC, copy="bulk"), "cp.async or tma"),
    (replace(CP_ASYNC, ahead=2), "a stage would be refilled while it is read"),
    (replace(CP_ASYNC, ahead=0), "a stage would be refilled while it is read"),
    (replace(CP_ASYNC, in_flight=2, stages=5, ahead=1), "0 or 1"),
    (replace(CP_ASYNC, in_flight=0, ahead=2, fragments_ahead=True, stages=2), "need 3 stages"),
    (replace(CP_ASYNC, fragments_ahead=True, stages=4, ahead=2), "live in the registers a group in flight"),
    (replace(CP_ASYNC, warps=(Warps("all", 1088, copiers=1088),)), "a CTA has 1024 at most"),
    (replace(CP_ASYNC, warps=(Warps("all", 256, copiers=300),)), "300 of the all's 256 threads copy"),
    (replace(CP_ASYNC, order=TileOrder(0)), "GROUP_M 0"),
    (replace(CP_ASYNC, order=TileOrder(8, persistent=True)), "persistent CTAs need a producer warpgroup"),
    (replace(CP_ASYNC, barriers=TMA.barriers), "without a producer"),
    (replace(TMA, copy="cp.async"), "not a producer"),
    (replace(TMA, warps=(Warps("all", 384, copiers=384),), barriers=()), "issued by a producer warpgroup"),
    (replace(TMA, warps=(Warps("consumers", 256), Warps("helpers", 128))), "'producer' and 'consumers'"),
    (replace(TMA, warps=(Warps("consumers", 192, registers=232), TMA.warps[1])), "whole warpgroups of 128"),
    (replace(TMA, warps=(Warps("consumers", 256, registers=236), TMA.warps[1])), "a multiple of 8 from 24 to 256"),
    (replace(TMA, warps=(Warps("consumers", 256, registers=256), Warps("producer", 128, 1, 40))),
     "the register file holds 65536"),
    (replace(TMA, entry_registers=0), "ptxas ignores it"),
    (replace(TMA, barriers=TMA.barriers[:1]), "need 'full' and 'empty'"),
    (replace(TMA, barriers=(StageBarrier("full", 2, "producer", "consumers", 49152), TMA.barriers[1])),
     "'full' expects 2 arrivals, but 1 producer thread(s) copy"),
    (replace(TMA, barriers=(StageBarrier("full", 1, "producer", "consumers", 4096), TMA.barriers[1])),
     "'full' expects 4096 bytes"),
    (replace(TMA, barriers=(TMA.barriers[0], StageBarrier("empty", 1, "consumers", "producer"))),
     "'empty' expects 1 arrivals from 2 consumer warpgroups"),
    (replace(TMA, barriers=(StageBarrier("full", 1, "consumers", "producer", 49152), TMA.barriers[1])),
     "the producer arrives on 'full'"),
    (replace(TMA, teams=3), "3 consumer teams: 1, or 2"),
    (replace(TMA, teams=2, order=TileOrder(8)), "consumer teams take the tiles of persistent CTAs"),
    (replace(TMA, teams=2, order=TileOrder(8, True, (2, 1))), "not in clusters"),
    (replace(TMA, teams=2, fragments_ahead=True), "read no fragments a stage ahead"),
    (replace(TMA, teams=2), "'empty' expects 2 arrivals from 1 consumer warpgroups of a team"),
    (replace(TMA, teams=2, warps=(Warps("consumers", 128, registers=232), TMA.warps[1])), "whole warpgroups each"),
])
def test_each_rule_names_what_breaks_it(broken, says):
    problems = broken.problems()
    assert any(says in p for p in problems), problems


def _compiled(path: str, kernel: str, config: dict, **options):
    program = parse_source((ROOT / path).read_text(), path)
    dumps = Dumps(schedule=True)
    compiled = compile_kernel(pick_kernel(program, kernel), arch="sm_90a", config=config, dumps=dumps, **options)
    return compiled, "\n".join(dumps.texts)


def test_the_tma_gemm_is_planned_warp_specialized():
    config = dict(TILE_M=128, TILE_N=256, TILE_K=64, WARPS=8, STAGES=4)
    compiled, text = _compiled("examples/gemm_bf16.phobos", "gemm_bf16", config, tma=True)
    assert compiled.threads == 384
    assert compiled.schedules == [text.removeprefix("// ")]
    assert "copy      tma, 4 stages of 49152 bytes" in text  # beside the epilogue's buffer of two 16 KB boxes
    assert "epilogue  the tile through shared memory, out by TMA bulk stores" in text and "persistent CTAs" in text
    assert "consumers: 256 threads, setmaxnreg 232" in text and "producer: 128 threads (1 of them copy), setmaxnreg 40" in text
    assert "full[stage]: 1 arrival(s) + 49152 bytes by the producer" in text
    assert "empty[stage]: 2 arrival(s) by the consumers" in text
    assert "1 wgmma group(s) in flight" in text


def test_one_cta_per_tile_keeps_four_stages_and_a_cluster_counts_both_ctas_consumers():
    config = dict(TILE_M=128, TILE_N=256, TILE_K=64, WARPS=8, STAGES=4)
    _, text = _compiled("examples/gemm_bf16.phobos", "gemm_bf16", dict(config, PERSISTENT=0), tma=True)
    assert "copy      tma, 4 stages of 49152 bytes" in text and "persistent" not in text and "epilogue" not in text
    compiled, text = _compiled("examples/gemm_bf16.phobos", "gemm_bf16", dict(config, CLUSTER_M=2), tma=True)
    assert "empty[stage]: 4 arrival(s) by the consumers" in text and "clusters of 2 x 1 CTAs, B multicast" in text
    assert compiled.cluster == 2 and ".reqnctapercluster 2, 1, 1" in compiled.ptx


def test_the_cp_async_gemm_and_a_plain_kernel():
    config = dict(TILE_M=128, TILE_N=256, TILE_K=64, WARPS=8, STAGES=4)
    _, text = _compiled("examples/gemm_bf16.phobos", "gemm_bf16", config)
    assert "cp.async, 4 stages" in text and "requested 2 iteration(s) ahead" in text and "all: 256 threads" in text
    compiled, text = _compiled("examples/add.phobos", "add", {})
    assert compiled.schedules == [] and "no pipelined loop" in text


def test_two_consumer_teams_share_the_ring_and_each_release_a_stage_alone():
    sound = replace(TMA, teams=2, barriers=(TMA.barriers[0], StageBarrier("empty", 1, "consumers", "producer")))
    assert sound.problems() == []
    config = dict(TILE_M=128, TILE_N=128, TILE_K=64, WARPS=4, STAGES=4, PINGPONG=1)
    compiled, text = _compiled("examples/gemm_bf16.phobos", "gemm_bf16", config, tma=True)
    assert compiled.threads == 384 and "consumers: 256 threads in 2 teams taking the tiles in turn (ping-pong)" in text
    assert "empty[stage]: 1 arrival(s) by the consumers" in text and "setmaxnreg 232" in text
