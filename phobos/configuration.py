# Configurations: the values a kernel's autotune parameters take in one
# compilation, the typed knobs among them, and how a configuration is written.
#
# Nine autotune parameter names are knobs: besides being i32 constants in the
# kernel, they set how the compiler lays the kernel out.  The checker
# validates their values (a located error at the value in the decorator) and
# hands lowering a `Knobs` value, where None means "the compiler chooses":
#
#   WARPS    warps (of 32 threads) per CTA: a power of two from 1 to 32
#            (a CTA has at most 1024 threads)
#   STAGES   depth of the cp.async pipeline of a matrix-product K loop on
#            sm_80 and newer: 2 to 8 (each stage holds one iteration's operand
#            tiles in shared memory; lowering takes fewer when they do not fit)
#   GROUP_M  row blocks per group in the grouped order of program ids of
#            matrix-product kernels: 1 (plain order) to 64
#   CTAS_PER_SM  CTAs that must fit on one SM at once: 1 to 32 (the PTX's
#            `.minnctapersm`, so ptxas caps each thread's registers to fit, and
#            lowering the shared memory a CTA may take, pipeline stages first)
#   PERSISTENT   0: one CTA per program instance; 1 (what the compiler
#            chooses where it can): a kernel built around a K loop copied by
#            TMA runs as many CTAs as fit the GPU at once, each looping over
#            the program instances (output tiles), the copies of the next
#            overlapping the epilogue of the last
#   PINGPONG 0 (what the compiler chooses) or 1: such persistent CTAs run two
#            teams of WARPS warps, which take the CTA's tiles in turn, so
#            that one team's epilogue runs under the other's products (the
#            kernel then has 2 x WARPS warps besides the producer); 0 where the
#            kernel has no such loop
#   CLUSTER_M, CLUSTER_N   1 or 2 (not both 2): persistent CTAs in clusters
#            of two along M (they share B's tiles, which TMA multicasts to
#            both: each copies half) or along N (sharing A's); 1 where the
#            kernel has no such loop
#   CLUSTER  1, 2, 4 or 8 (sm_90 and newer): each program instance is run by
#            a cluster of that many CTAs (`.reqnctapercluster`), each with its
#            own cluster_rank(), which combine scalars through distributed
#            shared memory (cluster_sum, cluster_max, cluster_min)
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

MAX_WARPS = 32  # 1024 threads per CTA


@dataclass(frozen=True)
class Knob:
    field: str  # its field in Knobs
    rule: str  # the values it takes, as messages and the docs say it
    valid: Callable[[int], bool]


KNOBS: dict[str, Knob] = {
    "WARPS": Knob("warps", f"a power of two from 1 to {MAX_WARPS}",
                  lambda v: 1 <= v <= MAX_WARPS and v & (v - 1) == 0),
    "STAGES": Knob("stages", "from 2 to 8", lambda v: 2 <= v <= 8),
    "GROUP_M": Knob("group_m", "from 1 to 64", lambda v: 1 <= v <= 64),
    "CTAS_PER_SM": Knob("ctas_per_sm", "from 1 to 32", lambda v: 1 <= v <= 32),
    "PERSISTENT": Knob("persistent", "0 or 1", lambda v: v in (0, 1)),
    "PINGPONG": Knob("pingpong", "0 or 1", lambda v: v in (0, 1)),
    "CLUSTER_M": Knob("cluster_m", "1 or 2", lambda v: v in (1, 2)),
    "CLUSTER_N": Knob("cluster_n", "1 or 2", lambda v: v in (1, 2)),
    "CLUSTER": Knob("cluster", "1, 2, 4 or 8", lambda v: v in (1, 2, 4, 8)),
}


@dataclass(frozen=True)
class Knobs:
    """The knobs a configuration sets; None where the compiler chooses."""

    warps: int | None = None
    stages: int | None = None
    group_m: int | None = None
    ctas_per_sm: int | None = None
    persistent: int | None = None
    pingpong: int | None = None
    cluster_m: int | None = None
    cluster_n: int | None = None
    cluster: int | None = None

    @staticmethod
    def of(config: Mapping[str, int]) -> Knobs:
        """The knobs of a configuration whose values `knob_problem` accepts."""
        return Knobs(**{KNOBS[name].field: value for name, value in config.items() if name in KNOBS})


def knob_problem(name: str, value: int) -> str | None:
    """What is wrong with `value` for the autotune parameter `name`, if it is a knob; else None."""
    knob = KNOBS.get(name)
    if knob is None or knob.valid(value):
        return None
    return f"{name} must be {knob.rule}, got {value}"


class ConfigurationProblem(NamedTuple):
    """Knobs that cannot go together: why, the knob to blame, and the @require an autotune space that
    lists both leaves the pair out with."""

    why: str
    knob: str
    require: str

    @property
    def for_the_space(self) -> str:
        """The message for an autotune space that makes the pair."""
        return f"{self.why}; leave the pair out with @require({self.require})"


def configuration_problem(config: Mapping[str, int]) -> ConfigurationProblem | None:
    """What is wrong with the knobs of a configuration together (each alone passes `knob_problem`); None
    when nothing is."""
    if config.get("CLUSTER_M") == 2 and config.get("CLUSTER_N") == 2:
        return ConfigurationProblem("CLUSTER_M and CLUSTER_N cannot both be 2 (the two CTAs of a cluster share the "
                                    "tiles of A or of B, not both)", "CLUSTER_N", "CLUSTER_M * CLUSTER_N < 4")
    if config.get("PINGPONG") == 1 and 2 in (config.get("CLUSTER_M"), config.get("CLUSTER_N")):
        return ConfigurationProblem("PINGPONG=1 runs one CTA's tiles by two teams, not CTAs in clusters", "PINGPONG",
                                    "PINGPONG == 0 || CLUSTER_M * CLUSTER_N == 1")
    if config.get("PINGPONG") == 1 and config.get("PERSISTENT") == 0:
        return ConfigurationProblem("PINGPONG=1 is a schedule of persistent CTAs", "PINGPONG",
                                    "PINGPONG <= PERSISTENT")
    return None


def config_text(config: Mapping[str, int]) -> str:
    """`TILE_M=64, TILE_N=128`: how a configuration is named in messages, timings and dumps."""
    return ", ".join(f"{name}={value}" for name, value in config.items()) or "no autotune parameters"
