"""The memory scan's rows: how :meth:`search._evaluator.Evaluator.scan_memory` walks a block's candidates
(:class:`Walk`, computed once per entries), and the candidates that fit, in the space's order, built
only when read (:class:`FitList`: a search holds 10^4-10^5 and times 10^3)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from functools import cached_property
from itertools import chain
from typing import NamedTuple, overload

from search._parallel_spec import Framework, Placement
from search._space import Block, Candidate, Variant


class PairWalk(NamedTuple):
    """One (runtime, tiles) pair of a block's entries, micro-batch by micro-batch."""

    pair: tuple[Framework, int]
    micro_batches: tuple[int, ...]
    """The micro-batches it has a candidate at, ascending."""
    firsts: tuple[int, ...]
    """Per micro-batch, the index in the walk of its first candidate there (the one the scan plans)."""
    placements: tuple[Placement, ...]
    """Per micro-batch, that candidate's placement."""
    steps: tuple[tuple[int, ...], ...]
    """Per micro-batch, the indices in the walk of its candidates there (placements: the same bytes)."""


class Walk(NamedTuple):
    """A block's entries as :meth:`Evaluator.scan_memory` walks them: candidate by candidate (their
    index in the walk), micro-batch ascending. Blocks share their entries (search._space.enumerate_space):
    computed once per entries."""

    pairs: tuple[PairWalk, ...]
    present: frozenset[tuple[int, Framework, int]]
    """The (micro-batch, runtime, tiles) candidates, placements aside."""
    ends: dict[int, int]
    """Per micro-batch, how many candidates the walk has visited at its end."""
    micro_batches: tuple[int, ...]
    """Each candidate's micro-batch."""
    variants: tuple[Variant, ...]
    """Each candidate's (runtime, placement, tiles)."""
    runtime: Framework | None
    """The candidates' runtime where they have one, else None."""
    single: bool
    """Whether the candidates have one (runtime, tiles) pair: the scan's rows of the block are then the
    walk's first candidates, up to the first that does not fit."""


def walk_of(entries: tuple[tuple[int, tuple[Variant, ...]], ...]) -> Walk:
    micro_batches = [mb for mb, variants in entries for _v in variants]
    variants = [v for _mb, vs in entries for v in vs]
    ends, count = {}, 0
    for mb, vs in entries:
        count = ends[mb] = count + len(vs)
    pairs: dict[tuple[Framework, int], list[tuple[int, Placement, list[int]]]] = {}
    for index, (mb, (runtime, placement, tiles)) in enumerate(zip(micro_batches, variants, strict=True)):
        at_mb = pairs.setdefault((runtime, tiles), [])
        if at_mb and micro_batches[at_mb[-1][2][0]] == mb:
            at_mb[-1][2].append(index)
        else:
            at_mb.append((mb, placement, [index]))
    walks = tuple(PairWalk(pair, tuple(mb for mb, _p, _s in at), tuple(steps[0] for _mb, _p, steps in at),
                            tuple(p for _mb, p, _s in at), tuple(tuple(steps) for _mb, _p, steps in at))
                  for pair, at in pairs.items())
    present = frozenset((mb, runtime, tiles) for mb, (runtime, _p, tiles) in zip(micro_batches, variants, strict=True))
    runtimes = {runtime for runtime, _placement, _tiles in variants}
    return Walk(walks, present, ends, tuple(micro_batches), tuple(variants),
                 next(iter(runtimes)) if len(runtimes) == 1 else None, len(walks) == 1)


ScanOutcome = tuple[int, tuple[int, ...] | None, list[float], list[tuple[int, float]], int, Walk]
"""What the memory scan finds in one block (:meth:`Evaluator.scan_memory`): how many of its candidates
fit, their indices in its walk (None: the first ones), their peaks, the (index, peak) of the candidate
each failing (runtime, tiles) pair first failed at (the walk's order), how many candidates the walk
visited, and the walk."""


class FitRow(NamedTuple):
    """A candidate the scan looked at, with its peak: built into a :class:`Candidate` only when
    a sweep times it or a refinement starts from it."""

    block: Block
    micro_batch: int
    runtime: Framework
    placement: Placement
    tiles: int
    peak_bytes: float

    def candidate(self) -> Candidate:
        return Candidate(self.runtime, self.block.config(self.micro_batch, self.placement, self.tiles))


FitSpan = tuple[Block, int, Walk, "tuple[int, ...] | None", list[float]]
"""(block, index of its first row, its walk, the indices in the walk of its fitting candidates (None: the
walk's first ones), their peak GPU bytes) of the fitting rows of one block in a :class:`FitList`."""


class FitList(Sequence[Candidate]):
    """The fitting candidates in the space's order, block by block (``spans``: a search holds 10^4-10^5
    candidates and times 10^3), each built into a :class:`Candidate` on access; their micro-batches,
    variants and peaks as columns on demand."""

    def __init__(self, spans: list[FitSpan], runtimes: set[Framework]) -> None:
        self.spans = spans
        self.runtimes = runtimes
        """The runtimes of the rows."""
        self._starts = [start for _block, start, _walk, _at, _peaks in spans]
        self._size = spans[-1][1] + len(spans[-1][4]) if spans else 0

    def __len__(self) -> int:
        return self._size

    @cached_property
    def peaks(self) -> list[float]:
        """Each row's peak GPU bytes."""
        return list(chain.from_iterable(peaks for _block, _start, _walk, _at, peaks in self.spans))

    @cached_property
    def micro_batches(self) -> list[int]:
        """Each row's micro-batch."""
        return list(chain.from_iterable(walk.micro_batches[:len(peaks)] if at is None else
                                        [walk.micro_batches[j] for j in at]
                                        for _block, _start, walk, at, peaks in self.spans))

    @cached_property
    def variants(self) -> list[Variant]:
        """Each row's (runtime, placement, tiles)."""
        return list(chain.from_iterable(walk.variants[:len(peaks)] if at is None else [walk.variants[j] for j in at]
                                        for _block, _start, walk, at, peaks in self.spans))

    def row(self, index: int) -> FitRow:
        block, start, walk, at, peaks = self.spans[bisect_right(self._starts, index) - 1]
        j = index - start if at is None else at[index - start]
        return FitRow(block, walk.micro_batches[j], *walk.variants[j], peaks[index - start])

    @property
    def rows(self) -> list[FitRow]:
        """Every row as a :class:`FitRow` (built on each call)."""
        return [self.row(i) for i in range(len(self))]

    @overload
    def __getitem__(self, index: int) -> Candidate: ...

    @overload
    def __getitem__(self, index: slice) -> list[Candidate]: ...

    def __getitem__(self, index: int | slice) -> Candidate | list[Candidate]:
        if isinstance(index, slice):
            return [self.row(i).candidate() for i in range(len(self))[index]]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.row(index).candidate()


__all__ = ["FitList", "FitRow", "FitSpan", "PairWalk", "ScanOutcome", "Walk", "walk_of"]
