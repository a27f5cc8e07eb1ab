# Launch rules (@derive, @require, @key) and how the launcher applies them: which
# configurations may serve a call, the errors when none can, forcing with
# configure(), tuning keys and cost-model pruning, and the cache of choices.
# Bad decorators are in test_frontend_errors; the GPU is played by
# tests/launcher_fakes.
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import phobos
from phobos.launch import autotune
from phobos.compiler import parse_source
from phobos.errors import LaunchError, PhobosError
from phobos.frontend.launch_rules import Condition, LaunchRules, Term, next_pow2, term_text
from phobos.frontend.sema import configurations, launch_rules

from .frontend_support import front_end_errors
from .launcher_fakes import FakeGpu, forget_memory

ROWS = """\
@autotune(BN in [128, 256, 512], WARPS in [4, 8])
@require(BN >= N)
kernel rows(x: tensor<f32>[M, N], y: tensor<f32>[M, N]) {
    let r = program_id(0)
    y[r, 0 :+ BN] = x[r, 0 :+ BN] * 2.0
}
"""

DERIVED = """\
@autotune(WARPS in [4, 8])
@derive(BN = minimum(next_pow2(N), 256), PASSES = minimum(cdiv(N, BN), 2))
kernel rows(x: tensor<f32>[M, N], y: tensor<f32>[M, N]) {
    let r = program_id(0)
    for c in range(0, N, BN) {
        y[r, c :+ BN] = x[r, c :+ BN] * f32(PASSES)
    }
}
"""


def rules(src: str, name: str = "rules.phobos"):
    return launch_rules(parse_source(src, name).kernels[0])


def message(error: pytest.ExceptionInfo) -> str:
    return error.value.message


# --- the expressions


@pytest.mark.parametrize("x, expected", [(0, 1), (1, 1), (2, 2), (3, 4), (1000, 1024), (1024, 1024),
                                         (2**30 + 1, 2**31)])
def test_next_pow2(x, expected):
    assert next_pow2(x) == expected


def test_expressions_compute_exactly_with_c_division():
    r = rules("""\
        @derive(A = -7 / 2, B = -7 % 2, C = cdiv(N, 64), D = N * N * N / N / N, E = maximum(N, 3) - minimum(N, 3))
        kernel k(x: tensor<f32>[N]) {
        }
        """.replace("        ", ""))
    assert r.complete({}, {"N": 100000}) == {"A": -3, "B": -1, "C": 1563, "D": 100000, "E": 99997}


def test_expressions_print_as_written():
    r = rules("@require(!(N < 4) && (N + 1) * 2 <= 64 || N % 2 == 0)\nkernel k(x: tensor<f32>[N]) {\n}\n")
    assert r.conditions[0].text == "!(N < 4) && (N + 1) * 2 <= 64 || N % 2 == 0"
    assert term_text(r.conditions[0].term) == r.conditions[0].text


def test_a_comparison_of_comparisons_keeps_both_brackets():
    r = rules("@autotune(BN in [64, 128])\n@require((N <= 128) == (BN >= 64))\nkernel k(x: tensor<f32>[N]) {\n}\n")
    assert term_text(r.conditions[0].term) == "(N <= 128) == (BN >= 64)"


@pytest.mark.parametrize("conditions", [
    "N == 12345", "K == 2 * N", "N % 64 == 0", "BN * N <= 65536", "N >= 1 && N <= BN", "cdiv(N, BN) == 3",
    "next_pow2(N) == BN", "N / BN > 100", "N - BN >= 0, N <= BN",
])
def test_conditions_that_some_sizes_meet_are_accepted(conditions):
    src = f"@autotune(BN in [64, 128])\n@require({conditions})\nkernel k(x: tensor<f32>[N], y: tensor<f32>[K]) {{\n}}\n"
    assert front_end_errors(src) == []


def test_a_condition_some_configurations_never_meet_leaves_them_out():
    src = "@autotune(BM in [1, 4], BN in [4096, 8192])\n@require(BM * BN <= 8192)\nkernel k(x: tensor<f32>[N]) {\n}\n"
    assert front_end_errors(src) == []
    k = parse_source(src, "k.phobos").kernels[0]
    assert configurations(k) == [{"BM": 1, "BN": 4096}, {"BM": 1, "BN": 8192}]


def test_configurations_leave_out_those_no_sizes_can_serve():
    k = parse_source(ROWS.replace("BN >= N", "BN >= N && BN * WARPS <= 1024"), "k.phobos").kernels[0]
    assert configurations(k) == [{"BN": 128, "WARPS": 4}, {"BN": 128, "WARPS": 8}, {"BN": 256, "WARPS": 4}]


def test_derived_constants_are_checked_at_sample_sizes():
    k = parse_source(DERIVED, "k.phobos").kernels[0]
    assert configurations(k) == [{"WARPS": 4, "BN": 256, "PASSES": 2}, {"WARPS": 4, "BN": 1, "PASSES": 1},
                                 {"WARPS": 8, "BN": 256, "PASSES": 2}, {"WARPS": 8, "BN": 1, "PASSES": 1}]


def test_sample_sizes_move_into_the_range_the_conditions_allow():
    r = rules("@autotune(HEAD in [64])\n@derive(T = D * 2)\n@require(D == HEAD)\n"
              "kernel k(x: tensor<f32>[L, D]) {\n}\n")
    assert r.representative() == [{"HEAD": 64, "T": 128}]


# --- which configurations serve a call


def test_serving_keeps_the_valid_configurations_in_order():
    r = rules(ROWS)
    valid, rejected = r.serving(r.autotune_configurations(), {"M": 3, "N": 200})
    assert valid == [{"BN": 256, "WARPS": 4}, {"BN": 256, "WARPS": 8}, {"BN": 512, "WARPS": 4},
                     {"BN": 512, "WARPS": 8}]
    assert [x.config for x in rejected] == [{"BN": 128, "WARPS": 4}, {"BN": 128, "WARPS": 8}]
    assert all(x.condition is r.conditions[0] for x in rejected)


def test_derived_constants_join_the_configuration():
    r = rules(DERIVED)
    assert r.serving(r.autotune_configurations(), {"M": 2, "N": 100})[0] == [
        {"WARPS": 4, "BN": 128, "PASSES": 1}, {"WARPS": 8, "BN": 128, "PASSES": 1}]
    assert r.complete({"WARPS": 4}, {"M": 2, "N": 1000}) == {"WARPS": 4, "BN": 256, "PASSES": 2}


def test_a_derived_constant_beyond_i32_is_a_launch_error():
    r = rules("@derive(T = N * N)\nkernel k(x: tensor<f32>[N]) {\n}\n", "big.phobos")
    with pytest.raises(LaunchError) as error:
        r.complete({}, {"N": 100000})
    assert message(error) == ("k: @derive(T = N * N) at big.phobos:1:9 is 10000000000 for N=100000, which does not "
                              "fit the i32 constant T")


def test_a_derived_constant_beyond_i32_for_every_size_is_an_error_at_load_saying_so():
    src = "@derive(B = next_pow2(N) * 1000000000000)\nkernel k(x: tensor<f32>[N]) {\n}\n"
    with pytest.raises(PhobosError) as error:
        rules(src, "over.phobos")
    assert str(error.value).startswith(
        "over.phobos:1:9: B = next_pow2(N) * 1000000000000 overflows i32 for every size: it is at least "
        "1000000000000, and a derived constant is an i32 (-2147483648 to 2147483647)")
    rules("@derive(B = N * 1000)\nkernel k(x: tensor<f32>[N]) {\n}\n")  # fits for some sizes: fine


def test_a_derived_constant_beyond_i32_at_every_sample_size_says_so_when_compiled():
    src = "@derive(B = 4294967296 * N)\nkernel k(x: tensor<f32>[N]) {\n    x[0 :+ 16] = x[0 :+ 16] * f32(B)\n}\n"
    with pytest.raises(PhobosError) as error:
        phobos.compile_to_ptx(src)
    text = str(error.value)
    assert ":1:9: kernel 'k' derives B from its sizes, but no sample sizes give it a value" in text
    assert "which does not fit the i32 constant B" in text and "config={'B': ...}" in text


@pytest.mark.parametrize("params, size, ok", [(10, 1024, True), (11, 2048, False), (30, 2**30, False)])
def test_an_autotune_space_past_the_limit_is_refused_at_the_decorator_with_its_size(params, size, ok):
    """26 two-valued parameters used to exhaust 3 GB before anything was said: the size is counted
    from the lists, and a space past launch_rules.MAX_CONFIGURATIONS (1024) is a located error."""
    tune = ", ".join(f"A{i} in [1, 2]" for i in range(params))
    src = f"@autotune({tune})\nkernel k(x: tensor<f32>[N]) {{\n    x[0] = f32(A0)\n}}\n"
    r = rules(src, "space.phobos") if ok else None
    if ok:
        assert r.space_size() == size and len(list(r.autotune_configurations())) == size
        return
    with pytest.raises(PhobosError) as error:
        phobos.jit(src, filename="space.phobos")
    assert str(error.value).startswith(
        f"space.phobos:1:1: this autotune space has {size} configurations ({' x '.join(['2'] * params)}), "
        f"more than the 1024 a kernel may have")


def test_the_configurations_are_made_one_at_a_time():
    r = rules(ROWS)
    made = r.autotune_configurations({"WARPS": 8})
    assert next(made) == {"BN": 128, "WARPS": 8} and r.space_size({"WARPS": 8}) == 3


PINGPONG_SPACE = """\
@autotune(STAGES in [3, 4], PINGPONG in [0, 1])
kernel k(x: tensor<f32>[N]) {
    x[0] = f32(STAGES)
}
"""


def test_a_forced_knob_leaves_out_the_configurations_it_conflicts_with():
    """configure(PERSISTENT=0) on a kernel whose space lists PINGPONG in [0, 1] (the GEMM examples) made
    PINGPONG=1 configurations that the checker refused, so the first call failed: they are left out, as a
    @require would leave them; forced values that conflict together are refused at configure."""
    r = rules(PINGPONG_SPACE)
    assert list(r.autotune_configurations({"PERSISTENT": 0})) == [
        {"STAGES": 3, "PINGPONG": 0, "PERSISTENT": 0}, {"STAGES": 4, "PINGPONG": 0, "PERSISTENT": 0}]
    assert len(list(r.autotune_configurations({"CLUSTER_M": 2}))) == 2
    assert len(list(r.autotune_configurations({"PERSISTENT": 1}))) == 4
    k = phobos.jit(PINGPONG_SPACE, filename="pp.phobos").k
    assert [c["PINGPONG"] for c in k.configure(PERSISTENT=0)._kernel.candidates({"PERSISTENT": 0})] == [0, 0]
    with pytest.raises(PhobosError, match=r"k: configure\(PINGPONG=1, PERSISTENT=0\): PINGPONG=1 is a "
                                          r"schedule of persistent CTAs$"):
        k.configure(PINGPONG=1).configure(PERSISTENT=0)
    only_pingpong = phobos.jit(PINGPONG_SPACE.replace("PINGPONG in [0, 1]", "PINGPONG in [1]"),
                               filename="pp1.phobos").k
    with pytest.raises(PhobosError, match=r"k: with PERSISTENT=0, no configuration of the autotune space is left"):
        only_pingpong.configure(PERSISTENT=0)


def test_a_division_by_a_zero_size_is_a_launch_error():
    r = rules("@require(1000 / N > 2)\nkernel k(x: tensor<f32>[N]) {\n}\n", "z.phobos")
    with pytest.raises(LaunchError, match=r"@require\(1000 / N > 2\) at z.phobos:1:10 divides by zero for N=0"):
        r.serving([{}], {"N": 0})


# --- the launcher: the same candidates on every backend


@pytest.mark.parametrize("mode", ["interpret", "emulate"])
def test_cpu_modes_run_the_first_configuration_valid_for_the_sizes(mode):
    fn = phobos.jit(ROWS, "rows.phobos", mode=mode).rows
    x = np.arange(6 * 300, dtype=np.float32).reshape(6, 300)
    y = np.zeros_like(x)
    fn(x, y)
    assert fn.config == {"BN": 512, "WARPS": 4}
    np.testing.assert_array_equal(y, 2 * x)


@pytest.mark.parametrize("mode", ["interpret", "emulate"])
def test_cpu_modes_compute_derived_constants_per_call(mode):
    fn = phobos.jit(DERIVED, "derived.phobos", mode=mode).rows
    for n, config in ((100, {"WARPS": 4, "BN": 128, "PASSES": 1}), (600, {"WARPS": 4, "BN": 256, "PASSES": 2})):
        x = np.ones((2, n), np.float32)
        y = np.zeros_like(x)
        fn(x, y)
        assert fn.config == config
        np.testing.assert_array_equal(y, config["PASSES"])


def test_no_configuration_serving_the_sizes_is_a_launch_error_naming_the_condition_and_the_sizes():
    fn = phobos.jit(ROWS, "rows.phobos", mode="interpret").rows
    x = np.zeros((4, 1000), np.float32)
    with pytest.raises(LaunchError) as error:
        fn(x, x.copy())
    assert message(error) == (
        "rows: no configuration can serve M=4, N=1000:\n"
        "  @require(BN >= N) at rows.phobos:2:10 does not hold for BN=128, WARPS=4; BN=128, WARPS=8; "
        "BN=256, WARPS=4 and 3 more")


def test_forcing_a_configuration_a_condition_rejects_is_a_launch_error():
    gpu = FakeGpu()
    fn = phobos.jit(ROWS, "rows.phobos", mode=gpu).rows.configure(BN=128)
    x = np.zeros((4, 200), np.float32)
    with pytest.raises(LaunchError) as error:
        fn(x, x.copy())
    assert message(error) == ("rows: configure(BN=128) cannot serve M=4, N=200:\n"
                              "  @require(BN >= N) at rows.phobos:2:10 does not hold for BN=128, WARPS=4; "
                              "BN=128, WARPS=8")
    assert gpu.runs == [] and gpu.timed == []
    fn(x[:, :100].copy(), x[:, :100].copy())  # the same forced value serves shorter rows
    assert gpu.runs[0].compiled.config["BN"] == 128


def test_configure_refuses_derived_constants_and_values_no_sizes_can_serve():
    fn = phobos.jit(DERIVED, "derived.phobos", mode=FakeGpu()).rows
    with pytest.raises(PhobosError, match=r"'BN' is derived from the sizes \(@derive at derived.phobos:2:9\)"):
        fn.configure(BN=64)
    rows = phobos.jit(ROWS.replace("BN >= N", "BN >= N && N > 300"), "rows.phobos", mode=FakeGpu()).rows
    with pytest.raises(PhobosError, match=r"with BN=128, no sizes meet @require\(BN >= N && N > 300\)"):
        rows.configure(BN=128)
    rows.configure(BN=512)


def test_the_autotuner_never_compiles_or_times_an_invalid_configuration():
    gpu = FakeGpu()
    fn = phobos.jit(ROWS, "rows.phobos", mode=gpu).rows
    x = np.zeros((8, 300), np.float32)
    fn(x, x.copy())
    assert all(c["BN"] == 512 for c in gpu.timed_configs()) and len(gpu.timed_configs()) > 0
    assert set(fn.timings) == {"BN=512, WARPS=4", "BN=512, WARPS=8"}


def test_configurations_that_all_spill_are_timed_as_fallbacks(monkeypatch):
    """Where every configuration spills, the tuner times them anyway (a bench of attention's backward at
    d = 128 stopped with a TypeError here: the fallback was the kernel, not what evaluate prepares)."""
    def spills(kernel, device, ptxas):
        raise autotune.Skipped("spills registers (8 bytes stored, 8 bytes loaded)", fallback=kernel)
    monkeypatch.setattr(autotune, "screen", spills)
    gpu = FakeGpu()
    fn = phobos.jit(ROWS, "rows.phobos", mode=gpu).rows
    x = np.zeros((8, 300), np.float32)
    fn(x, x.copy())
    assert {c["BN"] for c in gpu.timed_configs()} == {512} and fn.config["BN"] == 512


def test_a_single_valid_configuration_is_run_without_tuning():
    gpu = FakeGpu()
    fn = phobos.jit(ROWS.replace("WARPS in [4, 8]", "WARPS in [4]"), "rows.phobos", mode=gpu).rows
    x = np.zeros((8, 300), np.float32)
    fn(x, x.copy())
    assert gpu.timed == [] and fn.config == {"BN": 512, "WARPS": 4}
    assert fn.timings == {"BN=512, WARPS=4": "not timed: the only configuration that serves the call"}


# --- tuning keys


def tuned(gpu: FakeGpu, src: str = ROWS):
    return phobos.jit(src, "rows.phobos", mode=gpu).rows


def calls(fn, gpu: FakeGpu, shapes) -> list[int]:
    """How many configurations were timed for each call (the finalists are timed twice)."""
    counts = []
    for shape in shapes:
        before = len(gpu.timed)
        x = np.zeros(shape, np.float32)
        fn(x, x.copy())
        counts.append(len({tuple(launch.compiled.config.items()) for launch in gpu.timed[before:]}))
    return counts


def test_by_default_sizes_within_one_power_of_two_share_a_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    gpu = FakeGpu()
    timed = calls(tuned(gpu), gpu, [(3, 100), (4, 100), (3, 120), (5, 100), (3, 30)])
    assert [n > 0 for n in timed] == [True, False, False, True, True]


def test_a_choice_is_never_reused_where_it_is_not_valid(tmp_path, monkeypatch):
    # N = 130 and N = 250 round up to the same power of two, but BN = 128 serves only the first
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    gpu = FakeGpu(times={"BN=128, WARPS=4": 0.5})
    fn = tuned(gpu, ROWS.replace("BN >= N", "BN >= N - 5"))
    x = np.zeros((3, 130), np.float32)
    fn(x, x.copy())
    assert fn.config == {"BN": 128, "WARPS": 4}
    x = np.zeros((3, 250), np.float32)
    fn(x, x.copy())
    assert fn.config["BN"] >= 250 - 5 and len(gpu.timed_configs()) > 6


def test_a_kernel_key_decides_what_shares_a_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    gpu = FakeGpu()
    fn = tuned(gpu, "@key(N)\n" + ROWS)
    assert calls(fn, gpu, [(3, 100), (700, 100), (3, 101)]) == [6, 0, 6]


@pytest.mark.parametrize("key, retuned", [
    ("exact", [True, True, False]),
    ("pow2", [True, False, False]),
    (lambda sizes: sizes["N"] > 64, [True, False, False]),
])
def test_a_call_can_say_how_sizes_map_to_keys(tmp_path, monkeypatch, key, retuned):
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    gpu = FakeGpu()
    fn = tuned(gpu).tuning(key=key)
    assert [n > 0 for n in calls(fn, gpu, [(3, 100), (3, 101), (3, 101)])] == retuned


def test_a_key_function_must_return_json():
    gpu = FakeGpu()
    fn = tuned(gpu).tuning(key=lambda sizes: {1, 2})
    x = np.zeros((3, 100), np.float32)
    with pytest.raises(LaunchError, match=r"the tuning key function returned \{1, 2\} for M=3, N=100"):
        fn(x, x.copy())


def test_choices_are_kept_on_disk_per_key(tmp_path, monkeypatch):
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    gpu = FakeGpu(times={"BN=256, WARPS=8": 0.25})
    x = np.zeros((3, 200), np.float32)
    tuned(gpu)(x, x.copy())
    forget_memory(monkeypatch)
    again = FakeGpu()
    fn = tuned(again)
    fn(np.zeros((4, 180), np.float32), np.zeros((4, 180), np.float32))  # other sizes, the same key
    assert again.timed == [] and fn.config == {"BN": 256, "WARPS": 8}


def test_a_cost_model_prunes_before_timing(tmp_path, monkeypatch):
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    gpu = FakeGpu()
    seen = []

    def cost(config, sizes):
        seen.append((dict(config), dict(sizes)))
        return config["BN"] / config["WARPS"]

    fn = tuned(gpu).tuning(cost=cost, keep=2)
    x = np.zeros((3, 200), np.float32)
    fn(x, x.copy())
    # costs 64, 32, 128, 64: the cheapest two, ties in listed order
    assert {tuple(c.items()) for c in gpu.timed_configs()} == {(("BN", 256), ("WARPS", 4)),
                                                             (("BN", 256), ("WARPS", 8))}
    assert all(sizes == {"M": 3, "N": 200} and config["BN"] >= 200 for config, sizes in seen)
    assert len(seen) == 4
    timed = len(gpu.timed)
    fn(x, x.copy())  # the same key: the choice is remembered, the model is not asked again
    assert len(seen) == 4 and len(gpu.timed) == timed
    one = tuned(gpu).tuning(cost=cost, keep=1)
    one(x, x.copy())
    assert one.timings == {"BN=256, WARPS=8": "not timed: the only configuration the cost model kept"}


@pytest.mark.parametrize("options, expected", [
    ({"key": "exactly"}, r"tuning key must be one of 'exact', 'pow2' or a function key\(sizes\); got 'exactly'"),
    ({"cost": lambda c, s: 1.0}, "tuning needs cost and keep together"),
    ({"cost": lambda c, s: 1.0, "keep": 0}, "tuning keep must be a positive integer"),
])
def test_bad_tuning_options(options, expected):
    with pytest.raises(PhobosError, match=expected):
        tuned(FakeGpu()).tuning(**options)


def test_a_cost_model_must_return_numbers():
    fn = tuned(FakeGpu()).tuning(cost=lambda config, sizes: "cheap", keep=1)
    x = np.zeros((3, 200), np.float32)
    with pytest.raises(LaunchError, match="the tuning cost model returned 'cheap' for BN=256, WARPS=4"):
        fn(x, x.copy())


def test_repr_shows_the_rules():
    text = repr(phobos.jit(DERIVED, "derived.phobos", mode=FakeGpu()).rows)
    assert "2 configurations (WARPS in [4, 8]); derives BN = minimum(next_pow2(N), 256); " \
           "derives PASSES = minimum(cdiv(N, BN), 2)" in text


# --- interval reasoning is sound: the bounds hold every value, so "can never hold" is never wrong

_INT_OPS = ["add", "sub", "mul", "div", "rem", "cdiv", "minimum", "maximum"]
_COMPARISONS = ["lt", "le", "gt", "ge", "eq", "ne"]


def _int_terms():
    leaves = st.one_of(st.sampled_from(["N", "M"]).map(lambda n: Term("name", "int", value=n)),
                       st.integers(-70, 70).map(lambda v: Term("const", "int", value=v)))
    return st.recursive(leaves, lambda inner: st.one_of(
        st.tuples(st.sampled_from(_INT_OPS), inner, inner).map(lambda t: Term(t[0], "int", (t[1], t[2]))),
        inner.map(lambda a: Term("next_pow2", "int", (a,))),
        inner.map(lambda a: Term("neg", "int", (a,)))), max_leaves=6)


def _conditions():
    comparisons = st.tuples(st.sampled_from(_COMPARISONS), _int_terms(), _int_terms()).map(
        lambda t: Term(t[0], "bool", (t[1], t[2])))
    return st.recursive(comparisons, lambda inner: st.one_of(
        st.tuples(st.sampled_from(["and", "or"]), inner, inner).map(lambda t: Term(t[0], "bool", (t[1], t[2]))),
        inner.map(lambda a: Term("not", "bool", (a,)))), max_leaves=3)


@settings(max_examples=150, deadline=None)
@given(_conditions(), st.integers(0, 3000), st.integers(0, 3000), st.integers(0, 3000), st.integers(0, 3000))
def test_bounds_contain_every_value(condition, n, m, a, b):
    ranges = {"N": (min(n, a), max(n, a)), "M": (min(m, b), max(m, b))}
    try:
        value = condition.evaluate({"N": n, "M": m})
    except ZeroDivisionError:
        return
    assert value in condition.bounds(ranges)
    rules = LaunchRules("k", {}, ["N", "M"], conditions=[Condition(condition, None)])
    narrowed, never = rules.ranges({})
    if value:
        assert never is None
        assert narrowed["N"][0] <= n <= narrowed["N"][1] and narrowed["M"][0] <= m <= narrowed["M"][1]
