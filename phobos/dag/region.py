# Regions: boxes in a tensor's coordinates, one half-open range per dimension.
#
#   Box(((0, 128), (256, 512)))     rows 0..127, columns 256..511
#
# Everything the tile DAG knows about where data is and who touches it is a
# box: a task's read and write regions, the pieces a distributed tensor's
# contents are made of, the part of a block a task is sent.  The geometry
# needed is small: overlap, intersection, a box relative to another's
# corner, and the difference of two boxes as at most 2 x rank
# disjoint boxes (cutting a piece around a newly written region).
from __future__ import annotations

from dataclasses import dataclass

Range = tuple[int, int]


@dataclass(frozen=True)
class Box:
    """A box: per dimension the half-open range [lo, hi)."""

    ranges: tuple[Range, ...]

    @staticmethod
    def whole(shape: tuple[int, ...]) -> Box:
        return Box(tuple((0, extent) for extent in shape))

    @property
    def rank(self) -> int:
        return len(self.ranges)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(hi - lo for lo, hi in self.ranges)

    @property
    def lower(self) -> tuple[int, ...]:
        return tuple(lo for lo, _ in self.ranges)

    @property
    def empty(self) -> bool:
        return any(hi <= lo for lo, hi in self.ranges)

    def intersect(self, other: Box) -> Box | None:
        """The common part, or None when the boxes do not overlap."""
        ranges = tuple((max(a, c), min(b, d)) for (a, b), (c, d) in zip(self.ranges, other.ranges))
        box = Box(ranges)
        return None if box.empty else box

    def overlaps(self, other: Box) -> bool:
        return self.intersect(other) is not None

    def relative_to(self, origin: Box) -> Box:
        """This box in the coordinates of `origin`'s lower corner."""
        return Box(tuple((lo - o, hi - o) for (lo, hi), o in zip(self.ranges, origin.lower)))

    def minus(self, other: Box) -> list[Box]:
        """This box without `other`: disjoint boxes, at most two per dimension."""
        common = self.intersect(other)
        if common is None:
            return [self]
        pieces = []
        rest = list(self.ranges)
        for dim, ((lo, hi), (clo, chi)) in enumerate(zip(self.ranges, common.ranges)):
            if lo < clo:
                pieces.append(Box(tuple(rest[:dim]) + ((lo, clo),) + tuple(rest[dim + 1:])))
            if chi < hi:
                pieces.append(Box(tuple(rest[:dim]) + ((chi, hi),) + tuple(rest[dim + 1:])))
            rest[dim] = (clo, chi)
        return pieces

    def slices(self) -> tuple[slice, ...]:
        """numpy indices selecting this box."""
        return tuple(slice(lo, hi) for lo, hi in self.ranges)

    def contiguous_in(self, shape: tuple[int, ...]) -> bool:
        """Whether this box of a row-major array of `shape` is one contiguous run of it:
        after the last dimension it cuts, full extents; before it, single elements."""
        cut = max((d for d, ((lo, hi), n) in enumerate(zip(self.ranges, shape)) if (lo, hi) != (0, n)),
                  default=None)
        return cut is None or all(hi - lo == 1 for lo, hi in self.ranges[:cut])

    def __str__(self) -> str:
        return "[" + ", ".join(f"{lo}:{hi}" for lo, hi in self.ranges) + "]"
