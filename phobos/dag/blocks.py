# Blocks - the arrays tasks produce and consume - and how a task's argument
# regions are put together from them, on the CPU or on a GPU.
#
#   HostArrays     numpy arrays (CPU workers, and the client gathering)
#   DeviceArrays   DeviceBlocks: allocations in a GPU worker's CUDA context,
#                  copied with cuMemcpy2D, handed to kernels through
#                  __cuda_array_interface__ (no copy)
#
# Both offer the same few operations, so `assemble` is written once: a region
# read whole from one block, or from a contiguous run of it (whole rows), is
# that block or a view of it; anything else, and every region a task writes,
# is a new array filled from its fragments (zeros where a fragment has no
# writer).  Blocks are never changed after the task that made them returns.
#
# A DeviceBlock stays in GPU memory while it stays on its worker.  Pickled -
# which is how Dask moves a block to another worker or to the client - it
# copies itself to host memory; unpickled, it is a block in host memory that
# the next GPU task to use it uploads (once: the block then lives on that GPU).
# The driver module is passed in, so all of this is tested with a stand-in.
from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .region import Box


@dataclass(frozen=True)
class FragmentSpec:
    """Where part of a region comes from: `box` of output `output` of input `input` (a writer's
    result), in that block's coordinates, going to `at` in the region's; input None means zeros."""

    input: int | None
    output: int
    box: Box
    at: Box


def assemble(arrays: Any, shape: tuple[int, ...], dtype: np.dtype, fragments: Sequence[FragmentSpec],
             inputs: Sequence[Sequence[Any]], written: bool) -> Any:
    """The array of one argument region: a view of an input block when the region is one contiguous
    run of it and is only read, else a new array (zeros first when any fragment is zeros)."""
    if not written and len(fragments) == 1 and fragments[0].input is not None \
            and fragments[0].at.shape == tuple(shape):
        fragment = fragments[0]
        block = arrays.adopt(inputs[fragment.input][fragment.output])
        if fragment.box.contiguous_in(block.shape):
            return arrays.window(block, fragment.box)
    zero = not fragments or any(f.input is None for f in fragments)
    region = arrays.zeros(shape, dtype) if zero else arrays.empty(shape, dtype)
    for fragment in fragments:
        if fragment.input is not None:
            block = arrays.adopt(inputs[fragment.input][fragment.output])
            arrays.copy(region, fragment.at, block, fragment.box)
    return region


# ---------------------------------------------------------------------------
# The CPU: numpy arrays


class HostArrays:
    """Blocks as numpy arrays."""

    name = "host"

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        yield

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.empty(shape, dtype)

    def zeros(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.zeros(shape, dtype)

    def adopt(self, block: Any) -> np.ndarray:
        """A block as a numpy array (a DeviceBlock that arrived here is already in host memory)."""
        return block.to_host() if isinstance(block, DeviceBlock) else np.asarray(block)

    def window(self, block: np.ndarray, box: Box) -> np.ndarray:
        view = block[box.slices()]
        view.flags.writeable = False  # blocks never change once made
        return view

    def copy(self, dst: np.ndarray, dst_box: Box, src: np.ndarray, src_box: Box) -> None:
        dst[dst_box.slices()] = src[src_box.slices()]

    def synchronize(self) -> None:
        pass


# ---------------------------------------------------------------------------
# A GPU: DeviceBlocks in one CUDA context


class DeviceArrays:
    """Blocks as DeviceBlocks in one context, through a pycuda.driver-like module."""

    name = "device"

    def __init__(self, driver: Any, context: Any):
        self.driver = driver
        self.context = context

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """The context made current in the calling thread for the duration."""
        self.context.push()
        try:
            yield
        finally:
            self.driver.Context.pop()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> DeviceBlock:
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        allocation = self.driver.mem_alloc(max(nbytes, 1))
        return DeviceBlock(tuple(shape), np.dtype(dtype), self, allocation, int(allocation))

    def zeros(self, shape: tuple[int, ...], dtype: np.dtype) -> DeviceBlock:
        block = self.empty(shape, dtype)
        if block.nbytes:
            self.driver.memset_d8(block.pointer, 0, block.nbytes)
        return block

    def adopt(self, block: Any) -> DeviceBlock:
        """A block in this context: as it is, or uploaded (in place, for a DeviceBlock that arrived in
        host memory, so later tasks here find it on the GPU)."""
        if isinstance(block, DeviceBlock):
            if block.host is not None:
                block.upload(self)
            return block
        array = np.ascontiguousarray(block)
        copy = self.empty(array.shape, array.dtype)
        if copy.nbytes:
            self.driver.memcpy_htod(copy.pointer, array)
        return copy

    def window(self, block: DeviceBlock, box: Box) -> DeviceBlock:
        """A view of a contiguous run of `block` (no copy; it keeps the block's memory alive)."""
        start = _flat_index(block.shape, box.lower) * block.dtype.itemsize
        return DeviceBlock(box.shape, block.dtype, self, block.allocation, block.pointer + start)

    def copy(self, dst: DeviceBlock, dst_box: Box, src: DeviceBlock, src_box: Box) -> None:
        """`src_box` of src to `dst_box` of dst: one 2-D copy (rows of the last dimension) per index
        of the dimensions before the last two."""
        itemsize = src.dtype.itemsize
        extents = src_box.shape
        if 0 in extents:
            return
        rows = extents[-2] if len(extents) > 1 else 1
        for outer in itertools.product(*(range(n) for n in extents[:-2])):
            src_corner = tuple(lo + i for lo, i in zip(src_box.lower, outer)) + src_box.lower[len(outer):]
            dst_corner = tuple(lo + i for lo, i in zip(dst_box.lower, outer)) + dst_box.lower[len(outer):]
            copy = self.driver.Memcpy2D()
            copy.set_src_device(src.pointer + _flat_index(src.shape, src_corner) * itemsize)
            copy.set_dst_device(dst.pointer + _flat_index(dst.shape, dst_corner) * itemsize)
            copy.src_pitch = src.shape[-1] * itemsize
            copy.dst_pitch = dst.shape[-1] * itemsize
            copy.width_in_bytes = extents[-1] * itemsize
            copy.height = rows
            copy(aligned=False)

    def download(self, block: DeviceBlock) -> np.ndarray:
        array = np.empty(block.shape, block.dtype)
        if block.nbytes:
            with self.current():
                self.driver.memcpy_dtoh(array, block.pointer)
        return array

    def synchronize(self) -> None:
        self.driver.Context.synchronize()


def _flat_index(shape: tuple[int, ...], index: tuple[int, ...]) -> int:
    flat = 0
    for extent, i in zip(shape, index):
        flat = flat * extent + i
    return flat


class DeviceBlock:
    """A row-major array in GPU memory (or, after travelling, in host memory until first used)."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, arrays: DeviceArrays | None, allocation: Any,
                 pointer: int, host: np.ndarray | None = None):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.arrays = arrays
        self.allocation = allocation  # what keeps the memory alive (shared by views)
        self.pointer = pointer
        self.host = host

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        if self.host is not None:
            raise ValueError("this block is in host memory; DeviceArrays.adopt uploads it")
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.pointer, False),
                "strides": None, "version": 3}

    def upload(self, arrays: DeviceArrays) -> None:
        """Move the host copy into `arrays`' context; the block is on the GPU from now on."""
        copy = arrays.adopt(self.host)
        self.arrays, self.allocation, self.pointer, self.host = arrays, copy.allocation, copy.pointer, None

    def to_host(self) -> np.ndarray:
        return self.host if self.host is not None else self.arrays.download(self)

    def __reduce__(self) -> tuple:
        return DeviceBlock.arrived, (self.to_host(),)

    @staticmethod
    def arrived(array: np.ndarray) -> DeviceBlock:
        """A block unpickled from host memory, uploaded by the first GPU task that uses it."""
        return DeviceBlock(array.shape, array.dtype, None, None, 0, array)

    def __repr__(self) -> str:
        where = "host memory" if self.host is not None else f"GPU memory at {self.pointer:#x}"
        return f"<DeviceBlock {self.dtype.name}{list(self.shape)} in {where}>"
