# The interpreter: a checked Phobos kernel run on the CPU with NumPy.
#
# Machines without a GPU (CI, most laptops) run kernels here.  `prepare`
# compiles the checked AST of one autotune configuration once into Python
# closures - one per statement and expression, every dispatch on node type,
# builtin and dtype done at compile time - and `InterpretedKernel.run`
# executes the program instances one after another (grid axis 0 fastest) on a
# frame, a list of slots that holds the grid coordinates, the arguments and the
# values of the kernel's names.  The AST is read as `irgen` reads it: literals
# take the dtype their context asks for, scalars and extents of 1 broadcast,
# `T[s] op= e` is a load, an operation and a store.
#
# Semantics, exactly those of the language unless noted:
#   values      numpy scalars or arrays of the exact compute dtype (bool, i32,
#               i64, u32, f32, f64; narrow float values are f32 arrays of
#               values the narrow format holds); every operator and cast is the one
#               `phobos.constants` defines (the checker folds constants with the
#               same functions): f32 rounds each step, integers wrap, integer
#               `/` truncates toward zero and `%` takes the dividend's sign;
#               float `/` and comparisons are IEEE (NaN != NaN).  Values are
#               never modified in place, so broadcasts may be read-only views.
#   loads       a tile of the slice sizes (a single index drops its dimension);
#               elements outside the tensor read 0.  Narrow floats load as
#               such (held as f32, as the compiled code holds them: an f16 or
#               8-bit NaN becomes the canonical one), i8 and i16 as i32.
#   stores      only elements inside the tensor are written, converted to the
#               tensor's dtype (round to nearest even; integers wrap).
#               atomic_add adds into the elements inside the tensor (f32
#               flushing subnormals, as the GPU's atom.add.f32 does).
#   bf16        tensors are numpy arrays of `ml_dtypes.bfloat16` (ml_dtypes is
#               not imported here: such arrays come with it), or uint16 arrays
#               holding the bit patterns; f8e4m3 and f8e5m2 ones of
#               `ml_dtypes.float8_e4m3fn` and `float8_e5m2`, or uint8 arrays of
#               the codes, read and written through the codes
#               (`constants.f8_values`, `f8_bits`: a store saturates, as the
#               GPU's cvt does).
#   dot         computed exactly in float64 and rounded once to f32; `x + dot(a,
#               b)` of equal types (so `acc += dot(a, b)`) is fused as the
#               back end's fuse-dot pass fuses it: x + a @ b rounded once
#               (8-bit floats: a @ b rounded, then added to x in f32).  The
#               GPU rounds after every fused multiply-add of its chain (or, on
#               the tensor cores, after each group of products), so its f32
#               result may differ from this one by those roundings.  The
#               operands are first rounded as the precision asks: tf32 rounds
#               them to TF32 (to nearest, ties to even: cvt.rn), tf32x3 splits
#               each into a TF32 high part and a TF32 remainder and sums three
#               products (high x high, high x low, low x high).
#   reductions  sum in the dtype (pairwise order; the GPU's tree order differs);
#               max/min ignore NaN like fmax and take +0.0 above -0.0;
#               argmax/argmin pick the first of the best, ignoring NaN (0 when
#               all are NaN).  An axis is kept with extent 1; no axis gives a
#               scalar.
#   math        f32 functions are evaluated in float64 and rounded once (the
#               GPU's approximations are documented in mathlib.py; sin and cos
#               of the GPU's turns, emulator.numerics.sin_approx), f64 ones by
#               NumPy (glibc's, within an ulp; gelu of a pair, as libm.py
#               computes it), 16-bit ones as f32 rounded to their format.
#   casts       float -> int truncates toward zero and saturates, NaN -> 0
#               (cvt.rzi); int -> int wraps; to float rounds to nearest even.
#   division    an integer divisor of 0 counts as 1 (`x / 0 == x`, `x % 0 ==
#               0`); `cdiv` is the exact quotient rounded up.
#   faults      an expression that cannot go on raises _Fault; the statement
#               running it reports an ExecutionError there (or the finer
#               class the fault names), noting the expression (a failing
#               device_assert; no arithmetic faults).
#   races       a store checks, per element, when (on the launch's clock,
#               _Order) it was stored last: a store of a different value (in
#               its bits) where another program instance stored is a
#               RaceError, as in the emulator (on the GPU the instance that
#               runs last wins) - unless an atomic_cas or atomic_xchg orders
#               the two (the other instance did one after its store, this one
#               before its own: a lock's release and acquire).  Stores of
#               equal values, atomics, and reads of what another instance
#               stored are not checked; nor are tensors of more than
#               RACE_CHECK_LIMIT elements.
#   jumps       `break`, `continue` and `return` raise exceptions that their
#               loop, function call or program instance catches; a device
#               function runs its checked copy (the checker's `calls`) on
#               slots of its own.
#   gathers     every subscript becomes an index array of the result's shape;
#               elements with an index outside the tensor read 0 and are not
#               written.  A scatter's duplicate indices keep one of the values.
#   atomics     element by element in row-major order, each seeing the ones
#               before (the GPU's order is unspecified); float max and min order
#               values as the GPU's integer trick does (-0 < +0, NaNs beyond the
#               infinities by sign), compare-and-swap compares bits.
#   scans       cumsum/cumprod in the dtype, left to right (the GPU combines in a
#               tree); scan and reduce with a combine function apply it left to
#               right along the axis, on whole slices at a time.
#   printing    device_print prints the lines the GPU would, instance by
#               instance, elements in row-major order.  A failing
#               device_assert prints nothing: it stops the instance with a
#               DeviceAssertError (assert_error) whose notes are its first
#               failures - element, and the values compared when the
#               condition is a comparison - and how many more there were.
#               The emulator makes the same error of the lines the GPU
#               prints (AssertionOutput).
from __future__ import annotations

import math
import operator
import re
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .. import constants
from ..dispatch import Dispatch
from ..frontend import ast
from ..frontend.builtins import BUILTINS, CAST_DTYPES, ORDERED_ATOMICS, argument, dot_precision
from ..frontend.parser import parse_source, pick_kernel
from ..errors import DeviceAssertError, ExecutionError, LaunchError, Loc, Note, PhobosError, RaceError, SourceFile
from ..frontend.sema import CheckedKernel, Inlined, Symbol, check_kernel
from ..middle.cluster_sync import check_cluster_reductions
from ..middle.irgen import generate
from ..types import VALUE_DTYPES, DType, ScalarType, TensorType, TileType, TupleType, shape_of


Fn = Callable[[list], object]  # a compiled expression or statement: frame -> value

NP = {d: np.dtype(d.numpy_name).type for d in DType if d is not DType.BF16 and not d.is_f8}  # numpy's own types
VALUE = {d: constants.NUMPY[d].type for d in VALUE_DTYPES}  # values (narrow floats held as f32)
GRID_SLOTS = 7  # frame[0:3] = program_id(0..2), frame[3:6] = num_programs(0..2), frame[6] = the launch's _Order
ORDER_SLOT = 6


class _Jump(Exception):
    """A `break`, `continue` or `return` on its way to what it leaves."""


class _Break(_Jump):
    pass


class _Continue(_Jump):
    pass


def _iteration(body: Fn, f: list) -> bool:
    """Runs one iteration of a loop's body; False when it left the loop with `break`."""
    try:
        body(f)
    except _Continue:
        pass
    except _Break:
        return False
    return True


class _Return(_Jump):
    def __init__(self, values: tuple):
        super().__init__()
        self.values = values


class _Fault(Exception):
    """A run-time fault inside an expression; the statement running it reports it, as a `kind`."""

    def __init__(self, message: str, loc: Loc | None, kind: type[ExecutionError] = ExecutionError):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.kind = kind


# ------------------------------------------------------------ value helpers
def _const(value, dtype: DType):
    """A compile-time value as a numpy scalar of `dtype` (wrapped or rounded as the dtype does)."""
    return VALUE[dtype](constants.convert(value, dtype))


def _broadcast(fn: Fn, have: tuple[int, ...] | None, want: tuple[int, ...] | None) -> Fn:
    """`fn` widened to a tile of shape `want` when its value has another shape."""
    if want is None or have == want:
        return fn
    return lambda f: np.broadcast_to(fn(f), want)


def _binary_function(op: str, dtype: DType):
    """The numpy function of the source operator `a op b` with a result of `dtype`, as `phobos.constants`
    defines it: arithmetic of a 16-bit float computed in f32 and rounded once to it."""
    opcode, attrs = constants.OPERATORS[op]
    fn = constants.operation(opcode, attrs)
    if dtype.is_half and opcode in constants.ROUNDED_OPCODES:
        return lambda a, b: constants.round_half(fn(a, b), dtype)
    return fn


def _via_f64(fn):
    """An elementwise function computed in float64 and rounded once to the argument's dtype."""
    def apply(x):
        with np.errstate(all="ignore"):
            return fn(x.astype(np.float64)).astype(x.dtype)
    return apply


_ERF = np.frompyfunc(math.erf, 1, 1)
_ERFC = np.frompyfunc(math.erfc, 1, 1)


def _erf(x):
    return np.asarray(_ERF(x), np.float64)


def _erfc(x):
    return np.asarray(_ERFC(x), np.float64)


_INV_SQRT2 = (0.7071067811865476, -4.833646656726457e-17)  # 1/sqrt(2) as a pair of doubles


def _gelu(x):
    """x erfc(-x / sqrt 2) / 2, -x / sqrt 2 carried as a pair of doubles (erfc amplifies the rounding of
    its argument by twice its square) and erfc of the pair to first order; -0.0 at -inf (the limit)."""
    y, error = _numerics().two_prod(-x, np.float64(_INV_SQRT2[0]))
    y_lo = error - x * _INV_SQRT2[1]
    with np.errstate(all="ignore"):
        slope = 2.0 / math.sqrt(math.pi) * np.exp(-y * y)
        return np.where(x == -np.inf, -0.0, x * (_erfc(y) - np.nan_to_num(y_lo * slope)) / 2.0)


UNARY_FLOAT = {
    "floor": np.floor, "ceil": np.ceil, "round": np.rint, "trunc": np.trunc,
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(10.0, x), "expm1": np.expm1,
    "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "erf": _erf, "erfc": _erfc, "gelu": _gelu,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh,
}
#: The operand whose NaN a function passes on (f64 keeps its payload), where it is not the argument: sigmoid is
#: 1 / (1 + exp(-x)), and -x flips the NaN's sign
NAN_OPERAND = {"sigmoid": np.negative}
BINARY_FLOAT = {"atan2": np.arctan2}
# f32 functions whose GPU form gives what rounding the float64 value would not: exp2, exp, log2, log
# and rsqrt are the GPU's ex2.approx.f32, lg2.approx.f32 and rsqrt.approx.f32 bit for bit (the
# emulator's model of the unit, emulator/mufu.py; exp is 2^(x * log2 e) and log is log2(x) * ln 2 as
# lower/mathlib.py writes them); sin.approx and cos.approx reduce
# the argument in f32 turns; gelu is x / 2 * (1 + erf(x / sqrt 2)) (lower/mathlib.py), NaN at -inf
# (-inf * 0), where f64's (lower/libm.py) gives the limit -0.0
APPROXIMATE_F32 = {"sin": lambda x: _numerics().sin_approx(x), "cos": lambda x: _numerics().cos_approx(x),
                   "exp2": lambda x: _approx_f32("ex2")(x), "rsqrt": lambda x: _approx_f32("rsqrt")(x),
                   "exp": lambda x: _approx_f32("ex2")(np.asarray(x, np.float32) * _log2e()),
                   "log2": lambda x: _approx_f32("lg2")(x),
                   "log": lambda x: _approx_f32("lg2")(x) * _ln2(),
                   "gelu": lambda x: np.where(x == -np.inf, np.nan, _gelu(x))}
BINARY_NUMERIC = {"maximum": "max", "minimum": "min"}  # the opcode of each


def _reducer(kind: str, axis: int | None):
    """sum/max/min/argmax/argmin over `axis` (kept with extent 1) or over everything (a scalar)."""
    keep = axis is not None
    if kind == "sum":
        return lambda x: _sum(np.asarray(x), axis, keep)
    if kind in ("max", "min"):
        return lambda x: constants.reduce_extreme(kind, x, axis, keep)
    extreme = kind[3:]

    def arg(x):  # the first element equal to the NaN-ignoring best
        with np.errstate(invalid="ignore"):
            hit = x == constants.reduce_extreme(extreme, x, axis, True)
        return np.argmax(hit, axis=axis, keepdims=keep).astype(np.int32)
    return arg


def _running(fn, x: np.ndarray, axis: int):
    """cumsum or cumprod along `axis` in the dtype: the first element as it is, NaNs after it as the
    GPU gives them (for f64 the payload of the first NaN element so far, as `_sum`)."""
    with np.errstate(all="ignore"):
        out = fn(x, axis=axis, dtype=x.dtype)
    if x.dtype.kind != "f" or x.shape[axis] == 1:
        return out
    moved = np.moveaxis(x, axis, 0)
    firsts, first = [], moved[0]
    for row in moved:
        first = np.where(np.isnan(first), first, row)
        firsts.append(first)
    fixed = constants.arithmetic_nan(np.moveaxis(out, axis, 0), np.stack(firsts))
    fixed[0] = moved[0]
    return np.moveaxis(fixed, 0, axis)


def _sum(x: np.ndarray, axis: int | None, keep: bool):
    """sum over `axis` in the dtype; a NaN result is the GPU's (for f64 the payload of the first NaN
    element, which the GPU's order need not pick: see docs/language.md), one element alone as it is."""
    with np.errstate(all="ignore"):
        out = np.sum(x, axis=axis, keepdims=keep, dtype=x.dtype)
    if x.dtype.kind != "f" or (x.size if axis is None else x.shape[axis]) == 1:
        return out
    flat = x.reshape(-1) if axis is None else np.moveaxis(x, axis, -1)
    first = np.take_along_axis(flat, np.argmax(np.isnan(flat), axis=-1)[..., None], -1)[..., 0]
    return constants.arithmetic_nan(out, first if keep is False else np.expand_dims(first, axis))


# ------------------------------------------------------------ tensors
#: Tensors of more elements than this are not checked for races (the check keeps 8 bytes per element).
RACE_CHECK_LIMIT = 1 << 23


class _Order:
    """What orders the program instances of one launch, for the race check: a clock that ticks when an
    instance starts and at each atomic_cas or atomic_xchg (which order an instance's other accesses around
    them).  Instances run one after another, x fastest, so the n-th to start is instance number n."""

    def __init__(self, grid: tuple[int, int, int]):
        self.grid = grid
        count = grid[0] * grid[1] * grid[2]
        self.clock = 0
        self.starts = np.zeros(count, np.int64)  # the clock when each instance started
        self.releases = np.zeros(count, np.int64)  # the clock of each instance's last atomic_cas/xchg
        self.running = -1
        self.acquired = False  # the running instance has done an atomic_cas/xchg

    def start(self) -> None:
        self.clock += 1
        self.running += 1
        self.starts[self.running] = self.clock
        self.acquired = False

    def order(self) -> None:
        """An atomic_cas or atomic_xchg: releases what the instance stored before, acquires what others
        released."""
        self.clock += 1
        self.releases[self.running] = self.clock
        self.acquired = True

    def racing(self, stored_at: np.ndarray) -> np.ndarray:
        """Which of the stores made at clocks `stored_at` (0: none) race with a store by the running instance."""
        others = (stored_at > 0) & (stored_at < self.starts[self.running])
        if self.acquired and others.any():
            writers = np.searchsorted(self.starts[:self.running + 1], stored_at, side="right") - 1
            others &= ~(self.releases[np.maximum(writers, 0)] > stored_at)
        return others

    def instance(self, clock: int) -> str:
        """`(x, y, z)` of the instance that ran at `clock`."""
        number = int(np.searchsorted(self.starts[:self.running + 1], clock, side="right") - 1)
        gx, gy = self.grid[0], self.grid[1]
        return f"({number % gx}, {number // gx % gy}, {number // (gx * gy)})"


@dataclass
class _Tensor:
    """A tensor argument of one launch, its conversions from storage to compute dtype and back, and per
    element the clock (_Order) of the last store there (0: none; made at the first store)."""

    name: str
    array: np.ndarray
    load: Callable
    store: Callable
    stored_at: np.ndarray | None = None

    def claim(self, index, stored, f: list) -> None:
        """The instance running in frame `f` stores `stored` (storage dtype) at `index`: a race _Fault where
        another instance stored a different value there, unordered."""
        if self.array.size > RACE_CHECK_LIMIT:
            return
        if self.stored_at is None:
            self.stored_at = np.zeros(self.array.shape, np.int64)
        order: _Order = f[ORDER_SLOT]
        before = np.asarray(self.stored_at[index])
        racing = order.racing(before)
        if racing.any():
            old = np.asarray(self.array[index])
            new = np.broadcast_to(stored, old.shape)
            racing &= _bits(old) != _bits(new)
            if racing.any():
                at = tuple(np.argwhere(racing)[0])
                raise _Fault(f"data race on '{self.name}': program {order.instance(order.clock)} stores "
                             f"{format_value(self.load(new[at]))} at element {_element(index, at)}, where program "
                             f"{order.instance(int(before[at]))} stored {format_value(self.load(old[at]))}; "
                             f"nothing orders program instances (atomic_add combines their values)", None, RaceError)
        self.stored_at[index] = order.clock


def _bits(values: np.ndarray) -> np.ndarray:
    """The bit patterns of `values` (so that NaNs compare by their bits and -0.0 differs from 0.0)."""
    return values.view(np.dtype(f"u{values.dtype.itemsize}"))


def _element(index: tuple, at: tuple) -> str:
    """The tensor coordinates of position `at` of the stored region `index` (slices and ints, or the index
    arrays of a scatter)."""
    if any(isinstance(i, np.ndarray) for i in index):
        coords = [int(i[at]) for i in index]
    else:
        rest = iter(at)
        coords = [i.start + int(next(rest)) if isinstance(i, slice) else int(i) for i in index]
    return f"({', '.join(map(str, coords))})"


def _tensor_codec(name: str, dtype: DType, array: np.ndarray) -> _Tensor:
    """Loads and stores of a tensor, as the compiled code holds narrow floats in f32 registers: an
    f16 loads through cvt.f32.f16 (a NaN becomes the canonical one), a bf16 by a shift (its bits
    stay); a store to either rounds through cvt.rn (a NaN becomes the canonical one).  A bf16 array,
    of ml_dtypes or uint16, is read and written through its bit patterns, an 8-bit float's through
    its codes (ml_dtypes' own conversions neither saturate nor canonicalize NaN)."""
    if dtype.is_f8:
        return _Tensor(name, array.view(np.uint8), lambda bits: constants.f8_values(bits, dtype),
                       lambda x: constants.f8_bits(x, dtype))
    storage = array.dtype
    if dtype is DType.BF16:
        return _Tensor(name, array, lambda x: constants.bf16_values(np.asarray(x).view(np.uint16)),
                       lambda x: np.asarray(constants.bf16_bits(x)).view(storage))
    if dtype is DType.F16:
        return _Tensor(name, array, constants.widen_f16, lambda x: constants.round_half(x, dtype).astype(storage))
    compute = NP[dtype.compute]
    return _Tensor(name, array, lambda x: x.astype(compute), lambda x: x.astype(storage))


def _accepted_dtypes(dtype: DType) -> list[str]:
    """The names of the numpy element types a tensor of `dtype` may have: bf16 is ml_dtypes' bfloat16 or
    the bits as uint16, an 8-bit float ml_dtypes' type or the codes as uint8 (by name, so that ml_dtypes is
    imported only by those who make such arrays)."""
    if dtype is DType.BF16:
        return ["uint16", "bfloat16"]
    if dtype.is_f8:
        return ["uint8", dtype.numpy_name]
    return [np.dtype(NP[dtype]).name]


def _clip(shape: tuple[int, ...], starts: list[int], sizes: tuple[int | None, ...]):
    """The part of a slice inside the tensor: (tensor index, tile index, whole slice inside?).

    The indexes are None when no element is inside.
    """
    index, part, inside = [], [], True
    for dim, start, size in zip(shape, starts, sizes):
        if size is None:
            if not 0 <= start < dim:
                return None, None, False
            index.append(start)
            continue
        lo, hi = max(start, 0), min(start + size, dim)
        if lo >= hi:
            return None, None, False
        if lo != start or hi != start + size:
            inside = False
        index.append(slice(lo, hi))
        part.append(slice(lo - start, hi - start))
    return tuple(index), tuple(part), inside


def _locator(slot: int, starts: list[Fn], sizes: tuple[int | None, ...]):
    """frame -> (tensor, tensor index, tile index, inside) for `T[...]` with these subscripts."""
    def locate(f):
        tensor = f[slot]
        return (tensor, *_clip(tensor.array.shape, [int(s(f)) for s in starts], sizes))
    return locate


# ------------------------------------------------------------ compiler
# The closure of each kind of statement and expression (keyed by AST class)
# and of each builtin (keyed by `Builtin.rule`; effect builtins are statements).
STATEMENTS = Dispatch("statement")
EXPRESSIONS = Dispatch("expression")
BUILTIN_RULES = Dispatch("builtin rule")


def _dot_product(dtype: DType, precision: str):
    """(a, b, x or None) -> x + a @ b: exact in float64, rounded once to f32 (f64: in f64), the
    operands first rounded as `precision` says (see the header)."""
    if dtype is DType.F64:
        def product64(a, b, x):
            with np.errstate(all="ignore"):
                out = a @ b if x is None else x + a @ b
            return _chain_nan(out, a, b, x)
        return product64
    if dtype is DType.I32:  # exact, wrapping: the low 32 bits of the 64-bit sums (which may wrap too)
        def integer(a, b, x):
            total = a.astype(np.int64) @ b.astype(np.int64)
            return (total if x is None else x.astype(np.int64) + total).astype(np.int32)
        return integer
    split = _PRECISION_TERMS[precision]

    def product(a, b, x):
        with np.errstate(all="ignore"):
            total = sum(p.astype(np.float64) @ q.astype(np.float64) for p, q in split(a, b))
            return constants.arithmetic_nan((total if x is None else x.astype(np.float64) + total)
                                            .astype(np.float32))
    return product


def _chain_nan(out, a, b, x):
    """The NaNs of an f64 dot as its chain of fma(a[i, k], b[k, j], acc) in k order gives them: the
    NaN operand of the last step that had one (a before b), quieted; else x's; else the made NaN."""
    nan = np.isnan(out)
    if not nan.any():
        return out
    a_nan, b_nan = np.isnan(a), np.isnan(b)
    steps = a_nan[..., :, :, None] | b_nan[..., None, :, :]          # (..., M, K, N)
    k = a.shape[-1]
    last = k - 1 - np.argmax(steps[..., ::-1, :], axis=-2)           # (..., M, N)
    a_at = np.take_along_axis(np.broadcast_to(a[..., :, :, None], steps.shape), last[..., None, :], -2)[..., 0, :]
    b_at = np.take_along_axis(np.broadcast_to(b[..., None, :, :], steps.shape), last[..., None, :], -2)[..., 0, :]
    fill = np.where(np.isnan(a_at), constants.quiet(a_at), constants.quiet(b_at))
    made = constants.made_nan(np.float64)
    base = made if x is None else np.where(np.isnan(x), constants.quiet(np.asarray(x, np.float64)), made)
    return np.where(nan, np.where(steps.any(axis=-2), fill, base), out)


def _tf32x3_terms(a, b):
    """high x high, high x low, low x high of operands split into a TF32 part and a TF32 rest."""
    a_hi, b_hi = constants.round_tf32(a), constants.round_tf32(b)
    a_lo, b_lo = constants.round_tf32(a - a_hi), constants.round_tf32(b - b_hi)
    return [(a_hi, b_hi), (a_hi, b_lo), (a_lo, b_hi)]


_PRECISION_TERMS = {
    "ieee": lambda a, b: [(a, b)],
    "tf32": lambda a, b: [(constants.round_tf32_even(a), constants.round_tf32_even(b))],
    "tf32x3": _tf32x3_terms,
}


class _Compiler:
    """Turns the statements and expressions of one checked kernel into closures over a frame."""

    def __init__(self, ck: CheckedKernel):
        self.ck = ck
        self.slots: dict[Symbol, int] = {}

    def slot(self, sym: Symbol) -> int:
        return self.slots.setdefault(sym, GRID_SLOTS + len(self.slots))

    def operand_dtype(self, a: ast.Expr, b: ast.Expr) -> DType:
        """The dtype two operands meet in, as irgen's: a literal-only side follows the other; a 16-bit
        float meets f32, or the other 16-bit format, in f32."""
        da, db = self.ck.types[a].dtype, self.ck.types[b].dtype
        if da == db or b in self.ck.weak:
            return da
        return db if a in self.ck.weak else da.compute

    # ------------------------------------------------------------ statements
    def block(self, block: ast.Block) -> Fn:
        steps = [(STATEMENTS.lookup(type(s))(self, s), s.loc) for s in block.stmts]

        def run(f):
            for step, loc in steps:
                try:
                    step(f)
                except (PhobosError, _Jump):
                    raise
                except _Fault as fault:
                    notes = [Note("in this operation", fault.loc)] if fault.loc not in (loc, None) else []
                    raise fault.kind(fault.message, loc, notes) from None
                except Exception as err:  # a bug in the interpreter: say where, keep the cause
                    raise ExecutionError(f"internal error in the interpreter ({type(err).__name__}: {err})",
                                         loc) from err
        return run

    @STATEMENTS.on(ast.Let)
    def stmt_let(self, s: ast.Let) -> Fn:
        sym = self.ck.symbols[s]
        slot = self.slot(sym)
        value = _broadcast(self.expr(s.value, sym.type.dtype), shape_of(self.ck.types[s.value]),
                           shape_of(sym.type))

        def run(f):
            f[slot] = value(f)
        return run

    @STATEMENTS.on(ast.Assign)
    def stmt_assign(self, s: ast.Assign) -> Fn:
        if isinstance(s.target, ast.Name):
            sym = self.ck.symbols[s.target]
            slot = self.slot(sym)
            value = self.assigned_value(s, operator.itemgetter(slot), sym.type)

            def run(f):
                f[slot] = value(f)
            return run
        slice_t = self.ck.types[s.target]
        if self.gathers(s.target):
            elements = self.elements(s.target)
            old = self.gather(elements, slice_t.dtype) if s.op != "=" else None
            return self.scatter(elements, self.stored_value(s, old, slice_t))
        slot, starts, sizes = self.access(s.target)
        old = self.load(slot, starts, sizes, slice_t.dtype) if s.op != "=" else None
        return self.write(slot, starts, sizes, self.stored_value(s, old, slice_t))

    def stored_value(self, s: ast.Assign, old: Fn | None, slice_t: ScalarType | TileType) -> Fn:
        """What `s` stores into a tensor slice of `slice_t`: the assigned value converted to the
        tensor's dtype from the dtype it has (as irgen's store converts it), so that the store
        itself only moves bits."""
        value = self.assigned_value(s, old, slice_t)
        to = slice_t.dtype
        if s.op != "=":
            frm = to.compute
        else:
            frm = to if s.value in self.ck.weak else self.ck.types[s.value].dtype
        if frm == to or not to.is_float:
            return value
        return lambda f: constants.convert_array(value(f), to, frm)

    def assigned_value(self, s: ast.Assign, old: Fn | None, target_t: ScalarType | TileType) -> Fn:
        """The value `s` assigns to a target of `target_t`: the right side, or `old op right`.

        `old` has the target's shape, and the checker lets only values that
        broadcast to it be assigned, so `old op right` has that shape too.
        """
        dtype = target_t.dtype
        if s.op == "=":
            return _broadcast(self.expr(s.value, dtype), shape_of(self.ck.types[s.value]), shape_of(target_t))
        if s.op == "+=" and self.fusable_dot(s.value, target_t):
            return self.fused_dot(old, s.value)
        fn, value = _binary_function(s.op[:-1], dtype), self.expr(s.value, dtype)
        return lambda f: fn(old(f), value(f))

    @STATEMENTS.on(ast.ExprStmt)
    def stmt_expr_stmt(self, s: ast.ExprStmt) -> Fn:  # a call for its effect; any value is dropped
        return self.expr(s.expr)

    @STATEMENTS.on(ast.Unpack)
    def stmt_unpack(self, s: ast.Unpack) -> Fn:
        syms = [self.ck.symbols[(s, i)] for i in range(len(s.names))]
        slots = [self.slot(sym) for sym in syms]
        if isinstance(s.value, ast.TupleLit):
            items = [_broadcast(self.expr(x, sym.type.dtype), shape_of(self.ck.types[x]), shape_of(sym.type))
                     for x, sym in zip(s.value.items, syms)]
            value = lambda f: tuple(item(f) for item in items)  # noqa: E731
        else:
            value = self.expr(s.value)

        def run(f):
            for slot, v in zip(slots, value(f)):
                f[slot] = v
        return run

    @STATEMENTS.on(ast.For)
    def stmt_for(self, s: ast.For) -> Fn:
        sym = self.ck.symbols[s]
        slot, make = self.slot(sym), NP[sym.type.dtype]
        lo, hi = self.expr(s.start, sym.type.dtype), self.expr(s.end, sym.type.dtype)
        step = self.expr(s.step, sym.type.dtype) if s.step is not None else (lambda f: 1)
        body = self.block(s.body)

        def run(f):
            by = int(step(f))
            if by == 0:  # a run-time step of 0 runs no iteration
                return
            for i in range(int(lo(f)), int(hi(f)), by):
                f[slot] = make(i)
                if not _iteration(body, f):
                    break
        return run

    @STATEMENTS.on(ast.While)
    def stmt_while(self, s: ast.While) -> Fn:
        cond, body = self.expr(s.cond), self.block(s.body)

        def run(f):
            while cond(f) and _iteration(body, f):
                pass
        return run

    @STATEMENTS.on(ast.Break)
    def stmt_break(self, s: ast.Break) -> Fn:
        def run(f):
            raise _Break()
        return run

    @STATEMENTS.on(ast.Continue)
    def stmt_continue(self, s: ast.Continue) -> Fn:
        def run(f):
            raise _Continue()
        return run

    @STATEMENTS.on(ast.Return)
    def stmt_return(self, s: ast.Return) -> Fn:
        frame = self.ck.returns[s]
        if s.value is None:
            def bare(f):
                raise _Return(())
            return bare
        items = s.value.items if isinstance(s.value, ast.TupleLit) else [s.value]
        values = [_broadcast(self.expr(x, t.dtype), shape_of(self.ck.types[x]), shape_of(t))
                  for x, t in zip(items, frame.result_types)]

        def run(f):
            raise _Return(tuple(v(f) for v in values))
        return run

    @STATEMENTS.on(ast.If)
    def stmt_if(self, s: ast.If) -> Fn:
        cond, then = self.expr(s.cond), self.block(s.then)
        orelse = self.block(s.orelse) if s.orelse is not None else (lambda f: None)

        def run(f):
            if cond(f):
                then(f)
            else:
                orelse(f)
        return run

    # ------------------------------------------------------------ tensors
    def access(self, e: ast.Index) -> tuple[int, list[Fn], tuple[int | None, ...]]:
        """The frame slot of the tensor of `T[...]`, its start closures and sizes (None: one index)."""
        starts, sizes = [], []
        for sub in e.subscripts:
            if isinstance(sub, ast.Slice):
                starts.append(self.expr(sub.start))
                sizes.append(self.ck.consts[sub.size])
            else:
                starts.append(self.expr(sub))
                sizes.append(None)
        return self.slot(self.ck.symbols[e.base]), starts, tuple(sizes)

    def gathers(self, e: ast.Index) -> bool:
        return any(not isinstance(sub, ast.Slice) and isinstance(self.ck.types[sub], TileType)
                   for sub in e.subscripts)

    def elements(self, e: ast.Index) -> Fn:
        """frame -> (tensor, index arrays of the result's shape per dim, mask of the elements inside):
        each subscript of `T[...]` as the index of every element of the result (as irgen makes it)."""
        result = shape_of(self.ck.types[e]) or ()
        gathered = len(result) - sum(1 for sub in e.subscripts if isinstance(sub, ast.Slice))
        tiles = [k for k, sub in enumerate(e.subscripts)
                 if not isinstance(sub, ast.Slice) and isinstance(self.ck.types[sub], TileType)]
        makers, axis = [], 0
        for k, sub in enumerate(e.subscripts):
            if isinstance(sub, ast.Slice):
                start, size, at = self.expr(sub.start), self.ck.consts[sub.size], axis
                shape = [1] * len(result)
                shape[at] = size
                ramp = np.arange(size, dtype=np.int64).reshape(shape)
                makers.append(lambda f, start=start, ramp=ramp: int(start(f)) + ramp)
                axis += 1
            elif k in tiles:
                index, t = self.expr(sub), self.ck.types[sub]
                first = axis + gathered - len(t.shape)  # aligned at the end of the index tiles' part
                shape = (1,) * first + t.shape + (1,) * (len(result) - first - len(t.shape))
                makers.append(lambda f, index=index, shape=shape: np.asarray(index(f), np.int64).reshape(shape))
                if k == tiles[-1]:
                    axis += gathered
            else:
                index = self.expr(sub)
                makers.append(lambda f, index=index: np.int64(index(f)))
        slot = self.slot(self.ck.symbols[e.base])

        def locate(f):
            tensor = f[slot]
            indices = np.broadcast_arrays(*[make(f) for make in makers], np.zeros(result, np.int64))[:-1]
            inside = np.ones(result, bool)
            for index, dim in zip(indices, tensor.array.shape):
                inside &= (index >= 0) & (index < dim)
            clipped = tuple(np.where(inside, index, 0) for index in indices)
            return tensor, clipped, inside
        return locate

    @staticmethod
    def gather(elements: Fn, dtype: DType) -> Fn:
        """`T[...]` with index tiles: elements outside the tensor read 0."""
        zero = VALUE[dtype](0)

        def run(f):
            tensor, index, inside = elements(f)
            values = tensor.load(tensor.array[index]) if tensor.array.size else np.zeros(inside.shape, VALUE[dtype])
            return np.where(inside, values, zero)[()]
        return run

    @staticmethod
    def scatter(elements: Fn, value: Fn) -> Fn:
        """`T[...] = v` with index tiles: elements outside the tensor are not written."""
        def run(f):
            v = value(f)
            tensor, index, inside = elements(f)
            v = np.broadcast_to(v, inside.shape)
            where, stored = tuple(i[inside] for i in index), tensor.store(v[inside])
            tensor.claim(where, stored, f)
            tensor.array[where] = stored
        return run

    @staticmethod
    def load(slot: int, starts: list[Fn], sizes: tuple[int | None, ...], dtype: DType) -> Fn:
        """`T[...]` read: elements outside the tensor read 0."""
        locate = _locator(slot, starts, sizes)
        shape, zero = tuple(n for n in sizes if n is not None), VALUE[dtype]

        def run(f):
            tensor, index, part, inside = locate(f)
            if inside:
                return tensor.load(tensor.array[index])
            out = np.zeros(shape, zero)
            if index is not None:
                out[part] = tensor.load(tensor.array[index])
            return out[()]
        return run

    @staticmethod
    def write(slot: int, starts: list[Fn], sizes: tuple[int | None, ...], value: Fn) -> Fn:
        """Store `value` into `T[...]`, skipping elements outside."""
        locate = _locator(slot, starts, sizes)

        def run(f):
            v = value(f)
            tensor, index, part, inside = locate(f)
            if index is None:
                return
            v = tensor.store(v if inside else v[part])
            tensor.claim(index, v, f)
            tensor.array[index] = v
        return run

    # ------------------------------------------------------------ expressions
    def expr(self, e: ast.Expr, want: DType | None = None) -> Fn:
        """The closure of `e`; a literal-only expression takes the dtype `want`."""
        t = self.ck.types[e]
        value = self.ck.consts.get(e)
        if value is not None and isinstance(t, ScalarType):
            c = _const(value, want if want is not None and e in self.ck.weak else t.dtype)
            return lambda f: c
        return EXPRESSIONS.lookup(type(e))(self, e)

    @EXPRESSIONS.on(ast.Name)
    def expr_name(self, e: ast.Name) -> Fn:
        return operator.itemgetter(self.slot(self.ck.symbols[e]))

    @EXPRESSIONS.on(ast.Unary)
    def expr_unary(self, e: ast.Unary) -> Fn:
        x, fn = self.expr(e.operand), constants.operation(constants.UNARY_OPERATORS[e.op], {})
        return lambda f: fn(x(f))

    @EXPRESSIONS.on(ast.TupleLit)
    def expr_tuple_lit(self, e: ast.TupleLit) -> Fn:
        items = [self.expr(x) for x in e.items]
        return lambda f: tuple(item(f) for item in items)

    @EXPRESSIONS.on(ast.Binary)
    def expr_binary(self, e: ast.Binary) -> Fn:
        dtype = self.operand_dtype(e.lhs, e.rhs)
        if e.op == "+":
            for dot, other in ((e.rhs, e.lhs), (e.lhs, e.rhs)):
                if self.fusable_dot(dot, self.ck.types[e]):
                    return self.fused_dot(self.expr(other, dtype), dot)
        a, b, fn = self.expr(e.lhs, dtype), self.expr(e.rhs, dtype), _binary_function(e.op, self.ck.types[e].dtype)
        if dtype is DType.F64:
            nan = constants.absorbed_nan(constants.OPERATORS[e.op][0], self.ck.consts.get(e.lhs),
                                         self.ck.consts.get(e.rhs))
            if nan is not None:  # as the compiler folds it (middle/passes/fold.py)
                return lambda f: np.full(np.broadcast_shapes(np.shape(a(f)), np.shape(b(f))), nan)[()]
        return lambda f: fn(a(f), b(f))

    @EXPRESSIONS.on(ast.Index)
    def expr_index(self, e: ast.Index) -> Fn:
        if isinstance(self.ck.types[e.base], TensorType) and self.gathers(e):
            return self.gather(self.elements(e), self.ck.types[e].dtype)
        if isinstance(self.ck.types[e.base], TensorType):
            return self.load(*self.access(e), self.ck.types[e].dtype)
        index = tuple(slice(self.ck.consts[sub.start], self.ck.consts[sub.start] + self.ck.consts[sub.size])
                      if isinstance(sub, ast.Slice) else self.ck.consts[sub] for sub in e.subscripts)
        x = self.expr(e.base)
        return lambda f: x(f)[index]

    @EXPRESSIONS.on(ast.Call)
    def expr_call(self, e: ast.Call) -> Fn:
        b = BUILTINS.get(e.func)
        if b is None:
            inlined = self.ck.calls[e]
            names = [p.name for p in inlined.function.params]
            exprs = list(e.args) + [None] * (len(names) - len(e.args))
            for kw in e.kwargs:
                exprs[names.index(kw.name)] = kw.value
            args = [self.expr(x, getattr(sym.type, "dtype", None)) for x, sym in zip(exprs, inlined.params)]
            return self.inline(inlined, args)
        return BUILTIN_RULES.lookup(b.rule)(self, e)

    def inline(self, inlined: Inlined, args: list[Fn]) -> Fn:
        """A call of a device function: the arguments into its parameters' slots, then its body; the
        value is what its `return` gives (one value, or a tuple)."""
        binds = []
        for sym, arg in zip(inlined.params, args):
            if not isinstance(sym.type, TensorType):  # a tensor parameter is the caller's own slot
                binds.append((self.slot(sym), arg, shape_of(sym.type)))
        body = self.block(inlined.body)
        single = len(inlined.frame.result_types or []) == 1

        def run(f):
            values = [(slot, arg(f), shape) for slot, arg, shape in binds]
            for slot, v, shape in values:
                f[slot] = v if shape is None or np.shape(v) == shape else np.broadcast_to(v, shape)
            try:
                body(f)
            except _Return as out:
                return out.values[0] if single else out.values
            return ()
        return run

    # ------------------------------------------------------------ builtins, one per typing rule
    def axis_of(self, e: ast.Call) -> int | None:
        axis_e, x_t = argument(e, 1, "axis"), self.ck.types[argument(e, 0, "x")]
        rank = len((x_t.items[0] if isinstance(x_t, TupleType) else x_t).shape)
        return None if axis_e is None else self.ck.consts[axis_e] % rank

    @BUILTIN_RULES.on("grid_index")
    def call_grid_index(self, e: ast.Call) -> Fn:
        first = 0 if e.func == "program_id" else 3
        return operator.itemgetter(first + self.ck.consts[e.args[0]])

    @BUILTIN_RULES.on("cluster_rank")
    def call_cluster_rank(self, e: ast.Call) -> Fn:
        return lambda f: np.int32(0)  # a cluster of one CTA (InterpretedKernel.run refuses larger ones)

    @BUILTIN_RULES.on("cluster_reduce")
    def call_cluster_reduce(self, e: ast.Call) -> Fn:
        return self.expr(e.args[0], self.ck.types[e].dtype)  # combined over one CTA: itself

    @BUILTIN_RULES.on("dot")
    def call_dot(self, e: ast.Call) -> Fn:
        a, b = self.expr(e.args[0]), self.expr(e.args[1])
        product = _dot_product(self.ck.types[e].dtype, dot_precision(e))
        return lambda f: product(a(f), b(f), None)

    def fusable_dot(self, e: ast.Expr, sum_t) -> bool:
        """Whether `x + e` is fused: e is a dot whose type is that of the sum (as fuse-dot requires), of
        operands whose sums start from x (not those that promote: DType.dot_promotes)."""
        return isinstance(e, ast.Call) and e.func == "dot" and self.ck.types[e] == sum_t \
            and not self.ck.types[e.args[0]].dtype.dot_promotes

    def fused_dot(self, x: Fn, e: ast.Call) -> Fn:
        """x + dot(a, b) with one rounding."""
        a, b = self.expr(e.args[0]), self.expr(e.args[1])
        product = _dot_product(self.ck.types[e].dtype, dot_precision(e))
        return lambda f: product(a(f), b(f), x(f))

    @BUILTIN_RULES.on("reduce", "reduce_index")
    def call_reduce(self, e: ast.Call) -> Fn:
        x, fn = self.expr(e.args[0]), _reducer(e.func, self.axis_of(e))
        return lambda f: fn(x(f))

    @BUILTIN_RULES.on("unary_float")
    def call_unary_float(self, e: ast.Call) -> Fn:
        dtype = self.ck.types[e].dtype
        x, fn = self.expr(e.args[0], dtype), UNARY_FLOAT[e.func]
        if dtype.compute is DType.F32:
            fn = _via_f64(APPROXIMATE_F32.get(e.func, fn))
        operand = NAN_OPERAND.get(e.func, lambda v: v)
        if dtype.is_half:  # computed in f32, rounded to the 16-bit format
            return lambda f: (lambda v: constants.round_half(constants.arithmetic_nan(fn(v), operand(v)), dtype))(x(f))
        return lambda f: (lambda v: constants.arithmetic_nan(fn(v), operand(v)))(x(f))

    @BUILTIN_RULES.on("binary_float")
    def call_binary_float(self, e: ast.Call) -> Fn:  # atan2, as unary_float: in f64, rounded once
        dtype = self.ck.types[e].dtype
        a, b = (self.expr(x, dtype) for x in e.args)
        exact, out = BINARY_FLOAT[e.func], dtype.compute

        def fn(p, q):  # a NaN as the compiled atan2(y, x) gives it: f32's canonical, f64's x's before y's
            value = exact(p.astype(np.float64), q.astype(np.float64)).astype(out.numpy_name)
            return constants.arithmetic_nan(value, q, p)
        if dtype.is_half:
            return lambda f: constants.round_half(fn(np.asarray(a(f)), np.asarray(b(f))), dtype)
        return lambda f: fn(np.asarray(a(f)), np.asarray(b(f)))[()]

    @BUILTIN_RULES.on("unary_numeric")
    def call_unary_numeric(self, e: ast.Call) -> Fn:  # abs
        x, fn = self.expr(e.args[0], self.ck.types[e].dtype), constants.operation("abs", {})
        return lambda f: fn(x(f))

    @BUILTIN_RULES.on("binary_numeric")
    def call_binary_numeric(self, e: ast.Call) -> Fn:
        dtype = self.operand_dtype(e.args[0], e.args[1])
        a, b, fn = self.expr(e.args[0], dtype), self.expr(e.args[1], dtype), constants.operation(BINARY_NUMERIC[e.func], {})
        return lambda f: fn(a(f), b(f))

    @BUILTIN_RULES.on("binary_int")
    def call_binary_int(self, e: ast.Call) -> Fn:  # cdiv
        dtype = self.ck.types[e].dtype
        a, b, fn = self.expr(e.args[0], dtype), self.expr(e.args[1], dtype), constants.operation(e.func, {})
        return lambda f: fn(a(f), b(f))

    @BUILTIN_RULES.on("where")
    def call_where(self, e: ast.Call) -> Fn:
        dtype = self.ck.types[e].dtype
        c, a, b = self.expr(e.args[0]), self.expr(e.args[1], dtype), self.expr(e.args[2], dtype)
        select = constants.operation("select", {})
        return lambda f: select(c(f), a(f), b(f))[()]

    @BUILTIN_RULES.on("arange")
    def call_arange(self, e: ast.Call) -> Fn:
        start = self.ck.consts[e.args[0]] if len(e.args) == 2 else 0
        tile = np.arange(start, start + self.ck.types[e].shape[0], dtype=np.int32)
        tile.flags.writeable = False
        return lambda f: tile

    @BUILTIN_RULES.on("full")
    def call_full(self, e: ast.Call) -> Fn:
        t = self.ck.types[e]
        return _broadcast(self.expr(e.args[1], t.dtype), None, t.shape)

    @BUILTIN_RULES.on("reshape")
    def call_reshape(self, e: ast.Call) -> Fn:
        x, shape = self.expr(e.args[0]), self.ck.types[e].shape
        return lambda f: x(f).reshape(shape)

    @BUILTIN_RULES.on("cast")
    def call_cast(self, e: ast.Call) -> Fn:
        x, frm = self.expr(e.args[0]), self.ck.types[e.args[0]].dtype
        to = CAST_DTYPES[e.func]
        return lambda f: constants.convert_array(x(f), to, frm)


    @BUILTIN_RULES.on("fma")
    def call_fma(self, e: ast.Call) -> Fn:
        dtype = self.ck.types[e].dtype
        a, b, c = (self.expr(x, dtype) for x in e.args)
        numerics = _numerics()
        fma = numerics.fma_f32 if dtype is DType.F32 else numerics.fma_f64
        return lambda f: np.asarray(fma(a(f), b(f), c(f), "rn"), NP[dtype])[()]

    @BUILTIN_RULES.on("mulhi")
    def call_mulhi(self, e: ast.Call) -> Fn:
        dtype = self.ck.types[e].dtype
        a, b = (self.expr(x, dtype) for x in e.args)
        return lambda f: constants.multiply_high(a(f), b(f))

    @BUILTIN_RULES.on("bitcast")
    def call_bitcast(self, e: ast.Call) -> Fn:
        x, to = self.expr(e.args[0]), NP[self.ck.types[e].dtype]
        return lambda f: np.asarray(x(f)).view(to)[()]

    @BUILTIN_RULES.on("scan_op")
    def call_scan_op(self, e: ast.Call) -> Fn:
        x, axis = self.expr(argument(e, 0, "x")), self.axis_of(e) or 0
        fn = np.cumsum if e.func == "cumsum" else np.cumprod
        return lambda f: _running(fn, np.asarray(x(f)), axis)

    def combine(self, e: ast.Call) -> Callable:
        """The combine function of a scan or reduce, called on whole slices: (a..., b...) -> tuple."""
        inlined = self.ck.calls[e]
        slots = [self.slot(sym) for sym in inlined.params]
        k = len(slots) // 2
        call = self.inline(inlined, [operator.itemgetter(slot) for slot in slots])

        def combine(f, a: tuple, b: tuple) -> tuple:
            for slot, v in zip(slots, a + b):
                f[slot] = v
            out = call(f)
            return out if k > 1 else (out,)
        return combine

    def combined(self, e: ast.Call) -> tuple[Fn, bool]:
        """frame -> the tiles a scan or reduce combines (broadcast to one shape); and whether a tuple."""
        x_e = argument(e, 0, "x")
        t = self.ck.types[x_e]
        items, types = (x_e.items, t.items) if isinstance(x_e, ast.TupleLit) else ([x_e], [t])
        fns = [_broadcast(self.expr(x, xt.dtype), shape_of(self.ck.types[x]), xt.shape) for x, xt in zip(items, types)]
        return (lambda f: tuple(fn(f) for fn in fns)), isinstance(x_e, ast.TupleLit)

    @BUILTIN_RULES.on("scan")
    def call_scan(self, e: ast.Call) -> Fn:
        xs, is_tuple = self.combined(e)
        axis, combine = self.axis_of(e) or 0, self.combine(e)

        def run(f):
            values = [np.moveaxis(np.asarray(v), axis, 0) for v in xs(f)]
            acc = tuple(v[0] for v in values)
            out = [[a] for a in acc]
            for i in range(1, values[0].shape[0]):
                acc = combine(f, acc, tuple(v[i] for v in values))
                for lst, a in zip(out, acc):
                    lst.append(a)
            result = tuple(np.moveaxis(np.stack(lst).astype(v.dtype), 0, axis) for lst, v in zip(out, values))
            return result if is_tuple else result[0]
        return run

    @BUILTIN_RULES.on("reduce_with")
    def call_reduce_with(self, e: ast.Call) -> Fn:
        xs, is_tuple = self.combined(e)
        axis, combine = self.axis_of(e), self.combine(e)

        def run(f):
            values = [np.asarray(v) for v in xs(f)]
            if axis is None:
                values = [v.reshape(-1, 1) for v in values]
            values = [np.moveaxis(v, 0 if axis is None else axis, 0) for v in values]
            acc = tuple(v[0] for v in values)
            for i in range(1, values[0].shape[0]):
                acc = combine(f, acc, tuple(v[i] for v in values))
            result = tuple(np.asarray(a, v.dtype)[0][()] if axis is None else np.expand_dims(np.asarray(a, v.dtype), axis)
                           for a, v in zip(acc, values))
            return result if is_tuple else result[0]
        return run

    @BUILTIN_RULES.on("permute")
    def call_permute(self, e: ast.Call) -> Fn:
        x = self.expr(e.args[0])
        order = (1, 0) if e.func == "trans" else tuple(self.ck.consts[d] for d in e.args[1].items)
        return lambda f: np.transpose(x(f), order)

    @BUILTIN_RULES.on("join")
    def call_join(self, e: ast.Call) -> Fn:
        t = self.ck.types[e]
        a, b = (_broadcast(self.expr(x, t.dtype), shape_of(self.ck.types[x]), t.shape[:-1] or None) for x in e.args)
        return lambda f: np.stack([np.asarray(a(f)), np.asarray(b(f))], axis=-1)

    @BUILTIN_RULES.on("split")
    def call_split(self, e: ast.Call) -> Fn:
        x = self.expr(e.args[0])
        return lambda f: (lambda v: (v[..., 0][()], v[..., 1][()]))(np.asarray(x(f)))

    @BUILTIN_RULES.on("concat")
    def call_concat(self, e: ast.Call) -> Fn:
        t = self.ck.types[e]
        a, b = self.expr(argument(e, 0, "a"), t.dtype), self.expr(argument(e, 1, "b"), t.dtype)
        axis_e = argument(e, 2, "axis")
        axis = 0 if axis_e is None else self.ck.consts[axis_e] % len(t.shape)
        return lambda f: np.concatenate([a(f), b(f)], axis=axis)

    @BUILTIN_RULES.on("atomic")
    def call_atomic(self, e: ast.Call) -> Fn:
        target, *operands = e.args
        dtype = self.ck.types[target.base].dtype
        values = [self.expr(x, dtype.compute) for x in operands]
        if dtype.is_half:  # x in the tensor's format first (as the GPU's 16-bit add takes it)
            values = [(lambda x: lambda f: constants.convert_array(np.asarray(x(f)), dtype))(x) for x in values]
        elements = self.elements(target)
        kind = e.func[len("atomic_"):]
        update, ordered = _ATOMIC_UPDATES[kind](dtype), kind in ORDERED_ATOMICS
        zero = NP[dtype.compute](0)

        def run(f):
            if ordered:
                f[ORDER_SLOT].order()
            args = [v(f) for v in values]
            tensor, index, inside = elements(f)
            args = [np.broadcast_to(a, inside.shape) for a in args]
            old = np.zeros(inside.shape, NP[dtype.compute])
            for pos in zip(*np.nonzero(inside)) if inside.ndim else ([()] if inside else []):
                at = tuple(np.asarray(i)[pos] for i in index)
                old[pos] = tensor.load(tensor.array[at])
                new = update(old[pos], *(a[pos] for a in args))
                tensor.array[at] = tensor.store(constants.convert_array(np.asarray(new), dtype) if dtype.is_half
                                                else new)
            return np.where(inside, old, zero)[()]
        return run

    @BUILTIN_RULES.on("print")
    def call_print(self, e: ast.Call) -> Fn:
        values = [self.expr(x, self.ck.types[x].dtype) for x in e.args[1:]]
        text = e.args[0].value
        shape = ()
        for x in e.args[1:]:
            shape = np.broadcast_shapes(shape, shape_of(self.ck.types[x]) or ())

        def run(f):
            arrays = [np.broadcast_to(v(f), shape) for v in values]
            for pos in np.ndindex(*shape):
                sys.stdout.write(print_line(f[0:3], pos if shape else None, text,
                                            [a[pos] for a in arrays]) + "\n")
            return ()
        return run

    @BUILTIN_RULES.on("assert")
    def call_assert(self, e: ast.Call) -> Fn:
        """A comparison's operands are computed apart (as expr_binary computes them), so that each failure
        can show them."""
        condition = e.args[0]
        text = e.args[1].value if len(e.args) > 1 else ""
        shape = shape_of(self.ck.types[condition]) or ()
        compare = condition.op if isinstance(condition, ast.Binary) and condition.op in COMPARISONS else None
        if compare is not None:
            dtype = self.operand_dtype(condition.lhs, condition.rhs)
            lhs, rhs, fn = self.expr(condition.lhs, dtype), self.expr(condition.rhs, dtype), _binary_function(compare, DType.BOOL)
        else:
            cond = self.expr(condition)

        def run(f):
            if compare is not None:
                a, b = lhs(f), rhs(f)
                ok = np.asarray(fn(a, b))
            else:
                ok = np.asarray(cond(f))
            if ok.all():
                return ()
            failed = list(zip(*np.nonzero(~ok))) if shape else [None]
            failures = []
            for pos in failed[:MAX_SHOWN_FAILURES]:
                shown = ""
                if compare is not None:
                    at = pos if pos is not None else ()
                    shown = (f"{format_value(np.broadcast_to(a, shape)[at])} {compare} "
                             f"{format_value(np.broadcast_to(b, shape)[at])}")
                failures.append(failure_text(where_text(f[0:3], pos), shown))
            raise assert_error(e.loc, text, failures, len(failed), "in this program instance")
        return run


def _approx_f32(op: str):
    """The GPU's `op.approx.f32` (the emulator's model of the unit), imported where a kernel uses it."""
    from .emulator import mufu
    return mufu.approx_f32(op, ftz=False)


def _ln2():
    """ln 2 as the f32 constant the lowering of log multiplies by."""
    from ..lower.mathlib import LN2
    return np.float32(LN2)


def _log2e():
    """log2 e as the f32 constant the lowering of exp multiplies by."""
    from ..lower.libm import LOG2E
    return np.float32(LOG2E)


def _numerics():
    """The emulator's exact arithmetic (fma's single rounding, atom.add.f32's flushing), imported - with the
    emulator's package - only where a kernel uses it."""
    from .emulator import numerics
    return numerics


def _float_order(dtype: DType):
    """The key by which the GPU's atomic float max/min order values: signed-integer order of the
    bits for a clear sign bit, reversed magnitude for a set one (-0 < +0; NaNs beyond the infinities)."""
    bits = np.dtype(f"i{dtype.nbytes}").type

    def key(x):
        i = int(np.asarray(x, NP[dtype]).view(bits))
        return i if i >= 0 else -(i & ((1 << (dtype.bits - 1)) - 1)) - 1
    return key


def _atomic_extreme(pick):
    def make(dtype: DType):
        if not dtype.is_float:
            return lambda old, x: pick(old, x, key=int)
        return lambda old, x: pick(old, x, key=_float_order(dtype))
    return make


def _same_bits(dtype: DType):
    bits = np.dtype(f"u{dtype.nbytes}").type
    return lambda old, cmp, x: x if np.asarray(old).view(bits) == np.asarray(cmp).view(bits) else old


_ATOMIC_UPDATES = {
    "add": lambda dtype: _numerics().atomic_add if dtype.is_float else (lambda old, x: old + x),
    "max": _atomic_extreme(max),
    "min": _atomic_extreme(min),
    "and": lambda dtype: lambda old, x: old & x,
    "or": lambda dtype: lambda old, x: old | x,
    "xor": lambda dtype: lambda old, x: old ^ x,
    "xchg": lambda dtype: lambda old, x: x,
    "cas": _same_bits,
}


# ------------------------------------------------------------ printing
def format_value(v) -> str:
    """A printed value, as the GPU's printf shows it: floats %.9g (f32) or %.17g (f64), integers in
    decimal, bools true/false."""
    v = np.asarray(v)[()]
    if isinstance(v, np.bool_):
        return "true" if v else "false"
    if isinstance(v, np.floating):
        return ("%.9g" if v.dtype == np.float32 else "%.17g") % float(v)
    return str(int(v))


def print_line(program, index, text: str, values) -> str:
    """One line of device_print: `[program (x, y, z) element (i, j)] text` with each {} a value (or the
    values after the text, when it has none)."""
    head = f"[{where_text(program, index)}]"
    shown = [format_value(v) for v in values]
    if "{}" in text:
        parts = text.split("{}")
        body = "".join(p + (shown[i] if i < len(shown) else "") for i, p in enumerate(parts))
    else:
        body = " ".join([text] + shown) if text else " ".join(shown)
    return f"{head} {body}"


#: The failures of a device_assert its error shows; it counts the others.
MAX_SHOWN_FAILURES = 5
#: The source operators of comparisons (whose operands a failing device_assert shows).
COMPARISONS = frozenset(op for op, (opcode, _) in constants.OPERATORS.items() if opcode == "cmp")


def where_text(program, index) -> str:
    """`program (x, y, z) element (i, j)`: where a line of device_print or device_assert comes from."""
    where = f"program ({', '.join(str(int(p)) for p in program)})"
    if index is not None:
        where += f" element ({', '.join(str(int(i)) for i in index)})"
    return where


def failure_text(where: str, shown: str = "") -> str:
    """One failure of a device_assert, as its error's note gives it: where_text, then the values compared
    (`: 50 < 50`) when the condition is a comparison."""
    return where + (f": {shown}" if shown else "")


def assert_error(loc: Loc, text: str, failures: list[str], count: int, scope: str) -> DeviceAssertError:
    """The error of a failed device_assert: its text at its location; notes give the first failures
    (failure_text) and how many more there were (`scope` says where they were counted)."""
    notes = [Note(failure) for failure in failures]
    if count > len(failures):
        notes.append(Note(f"and {count - len(failures)} more failure{'s' * (count - len(failures) > 1)} {scope}"))
    return DeviceAssertError(f"device_assert failed{': ' + text if text else ''}", loc, notes)


def device_asserts(checked: CheckedKernel) -> dict[tuple[str, int], tuple[Loc, str]]:
    """The device_asserts of a kernel (and of the device functions it calls): (file, line) -> (loc, text)."""
    bodies = [checked.kernel, *(inlined.body for inlined in checked.calls.values())]
    return {(call.loc.file, call.loc.line): (call.loc, call.args[1].value if len(call.args) > 1 else "")
            for body in bodies for call in ast.calls(body) if call.func == "device_assert"}


def assert_note(checked: CheckedKernel) -> Note | None:
    """For a failed launch on the GPU of a kernel with device_asserts: that a failing one stops it so, and
    which there are (the GPU prints the failures; the launch cannot tell which one trapped)."""
    asserts = sorted(device_asserts(checked).values())
    if not asserts:
        return None
    listed = "; ".join(f"{loc.file}:{loc.line}" + (f' "{text}"' if text else "") for loc, text in asserts)
    return Note(f"a failing device_assert stops the kernel with this error, after the GPU printed its failures "
                f"(the kernel's device_asserts: {listed}); mode='interpret' or 'emulate' reports them as a "
                f"DeviceAssertError")


class AssertionOutput:
    """What a kernel run in the emulator prints, with the lines of its failing device_asserts kept back:
    `error` turns those of the assertion a trap stopped at into its DeviceAssertError.  Every other line
    goes to `out`.  The lines are those lower/debug.py makes the GPU print per failing element,
    `file:line: program (x, y, z) element (i, j): device_assert failed: text (50 < 50)` (where_text, the
    text when there is one, the values compared when the condition is a comparison)."""

    def __init__(self, checked: CheckedKernel, out=None):
        self.out = out if out is not None else sys.stdout
        self.asserts = device_asserts(checked)
        self.kept: dict[tuple[str, int], list[tuple[str, str]]] = {}  # place -> (line, failure_text)
        self.pending = ""

    def write(self, text: str) -> None:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            failure = self._failure(line)
            if failure is None:
                self.out.write(line + "\n")
            else:
                self.kept.setdefault(failure[0], []).append((line, failure[1]))

    def flush(self) -> None:
        """Write out the end of a line that no newline ended."""
        if self.pending:
            self.out.write(self.pending)
            self.pending = ""

    def _failure(self, line: str) -> tuple[tuple[str, int], str] | None:
        """(the assertion's place, failure_text) of a failure line of a device_assert; None for other lines."""
        head, _, rest = line.partition(": program (")
        file, _, number = head.rpartition(":")
        place = (file, int(number)) if number.isdigit() else None
        if place not in self.asserts:
            return None
        text = self.asserts[place][1]
        where, marker, tail = ("program (" + rest).partition(": device_assert failed" + (f": {text}" if text else ""))
        if not marker:
            return None
        shown = tail.strip()
        return place, failure_text(where, shown[1:-1] if shown.startswith("(") else "")

    def error(self, loc: Loc | None) -> DeviceAssertError | None:
        """The DeviceAssertError of the assertion at `loc` (where a trap stopped), if it printed failures;
        else None, and the lines kept back are printed after all."""
        place = (loc.file, loc.line) if loc is not None else None
        if place not in self.asserts or not self.kept.get(place):
            for line, _ in (kept for lines in self.kept.values() for kept in lines):
                self.out.write(line + "\n")
            return None
        failures = sorted((failure for _, failure in self.kept[place]),  # by program and element, as interpreted
                          key=lambda failure: [int(n) for n in re.findall(r"\d+", failure.split(": ")[0])])
        return assert_error(self.asserts[place][0], self.asserts[place][1], failures[:MAX_SHOWN_FAILURES],
                            len(failures), "in the CTAs that ran with them")


# ------------------------------------------------------------ running
class InterpretedKernel:
    """One checked kernel configuration compiled to closures; `run` launches it on the CPU."""

    def __init__(self, ck: CheckedKernel):
        if any(BUILTINS[call.func].rule == "cluster_reduce" for call in ast.calls(ck.kernel.body)
               if call.func in BUILTINS):
            check_cluster_reductions(generate(ck))  # as the compiler refuses them (middle/cluster_sync.py)
        compiler = _Compiler(ck)
        self.name = ck.name
        self.body = compiler.block(ck.kernel.body)
        self.params = [(sym, compiler.slot(sym), sym.name in ck.written) for sym in ck.params]
        self.sizes = [(name, compiler.slot(b.symbol), b.uses) for name, b in ck.sizes.items()]
        self.nslots = GRID_SLOTS + len(compiler.slots)
        self.cluster = ck.knobs.cluster or 1

    def run(self, grid: int | Sequence[int], args: Sequence) -> None:
        """Run every program instance of `grid` in order (axis 0 fastest); stores modify `args` in place."""
        if self.cluster > 1:
            raise LaunchError(f"kernel '{self.name}': the interpreter runs each program instance as one CTA, "
                              f"not a cluster of CLUSTER={self.cluster}; the emulator (mode=\"emulate\") and "
                              f"the GPU run clusters")
        grid = _grid(grid)
        frame: list = [None] * self.nslots
        frame[3:6] = [np.int32(n) for n in grid]
        order = frame[ORDER_SLOT] = _Order(grid)
        with np.errstate(all="ignore"):
            self.bind(frame, args)
            for z in range(grid[2]):
                for y in range(grid[1]):
                    for x in range(grid[0]):
                        frame[0:3] = np.int32(x), np.int32(y), np.int32(z)
                        order.start()
                        try:
                            self.body(frame)
                        except _Return:
                            pass
                        except ExecutionError as err:
                            err.notes.append(Note(f"in program instance ({x}, {y}, {z}) of kernel '{self.name}'"))
                            raise

    def bind(self, frame: list, args: Sequence) -> None:
        """Check the launch arguments and put them, and the sizes they fix, into the frame."""
        if len(args) != len(self.params):
            names = ", ".join(sym.name for sym, _, _ in self.params)
            raise LaunchError(f"kernel '{self.name}' takes {len(self.params)} argument"
                              f"{'s' if len(self.params) != 1 else ''} ({names}), got {len(args)}")
        for (sym, slot, written), arg in zip(self.params, args):
            frame[slot] = _tensor_arg(sym, arg, written) if isinstance(sym.type, TensorType) \
                else _scalar_arg(sym, arg)
        for name, slot, uses in self.sizes:
            (first, dim), value = uses[0], args[uses[0][0]].shape[uses[0][1]]
            for index, d in uses[1:]:
                other = args[index].shape[d]
                if other != value:
                    sym = self.params[index][0]
                    raise LaunchError(f"argument '{sym.name}': dimension {d} is {other}, but size '{name}' is "
                                      f"{value} from dimension {dim} of '{self.params[first][0].name}'", sym.loc)
            if not constants.fits(value, DType.I32):
                sym = self.params[first][0]
                raise LaunchError(f"argument '{sym.name}': size '{name}' = {value} does not fit in i32", sym.loc)
            frame[slot] = np.int32(value)


def _grid(grid) -> tuple[int, int, int]:
    dims = (grid,) if isinstance(grid, (int, np.integer)) else tuple(grid)
    if not 1 <= len(dims) <= 3 or not all(isinstance(n, (int, np.integer)) and n >= 1 for n in dims):
        raise LaunchError(f"the grid must be 1 to 3 positive integers, got {grid!r}")
    return tuple(int(n) for n in dims) + (1,) * (3 - len(dims))


def _tensor_arg(sym: Symbol, arg, written: bool) -> _Tensor:
    t: TensorType = sym.type
    accepted = _accepted_dtypes(t.dtype)
    want = " or ".join(str(d) for d in accepted)
    if not isinstance(arg, np.ndarray):
        raise LaunchError(f"argument '{sym.name}' must be a numpy array of {want} ({t}), got "
                          f"{type(arg).__name__}", sym.loc)
    if arg.ndim != t.rank:
        raise LaunchError(f"argument '{sym.name}' must have {t.rank} dimension{'s' if t.rank != 1 else ''} "
                          f"({t}), got an array of shape {arg.shape}", sym.loc)
    if arg.dtype.name not in accepted:
        raise LaunchError(f"argument '{sym.name}' must be an array of {want} ({t}), got {arg.dtype}", sym.loc)
    if written and not arg.flags.writeable:
        raise LaunchError(f"argument '{sym.name}' is stored into but the array is read-only", sym.loc)
    for d, (dim, n) in enumerate(zip(t.dims, arg.shape)):
        if isinstance(dim, int) and dim != n:
            raise LaunchError(f"argument '{sym.name}': dimension {d} must be {dim} ({t}), got {n}", sym.loc)
    return _tensor_codec(sym.name, t.dtype, arg)


def _scalar_arg(sym: Symbol, arg):
    dtype = sym.type.dtype
    if isinstance(arg, np.ndarray) and arg.ndim == 0:
        arg = arg[()]
    is_bool = isinstance(arg, (bool, np.bool_))
    is_int = isinstance(arg, (int, np.integer)) and not is_bool
    is_float = isinstance(arg, (float, np.floating))
    if not (is_bool if dtype is DType.BOOL else is_int if dtype.is_int else is_int or is_float):
        raise LaunchError(f"argument '{sym.name}' must be a {dtype} scalar, got {type(arg).__name__} {arg!r}",
                          sym.loc)
    if not is_bool and not constants.fits(int(arg) if is_int else float(arg), dtype):
        raise LaunchError(f"argument '{sym.name}' = {arg} does not fit in {dtype}", sym.loc)
    return NP[dtype](arg)


def prepare(checked: CheckedKernel) -> InterpretedKernel:
    """Compile a checked kernel configuration for repeated runs."""
    return InterpretedKernel(checked)


def run(checked: CheckedKernel, grid: int | Sequence[int], args: Sequence) -> None:
    """Run a checked kernel on the CPU: the interpreter back end's entry point.

    `args` follow the kernel's parameters: numpy arrays for tensors (stores
    modify them in place), Python or numpy scalars for scalar parameters; sizes
    are bound from the arrays' shapes.  Bad arguments raise LaunchError, faults
    while running ExecutionError, both with a source location.
    """
    prepare(checked).run(grid, args)


def interpret(src: str, kernel: str | None = None, config: dict[str, int] | None = None, *,
              grid: int | Sequence[int] = 1, args: Sequence = (), filename: str | None = None) -> None:
    """Parse and check `src`, then run one kernel (the only one, or `kernel`) under `config`."""
    k = pick_kernel(parse_source(src, filename or SourceFile.name_for(src)), kernel)
    run(check_kernel(k, config), grid, args)
