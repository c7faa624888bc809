"""Typed breakdowns of a prediction: exposed seconds per term of an iteration, and the fullest GPU's
bytes per component. Frozen dataclasses with one field per term (units in the names), read as
mappings from the term's name (without the unit) to its value, as the API, tables and charts
print them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import ClassVar, TypeVar

from search._errors import SpecError

B = TypeVar("B", bound="_Breakdown")


class _Breakdown(Mapping[str, float]):
    """A frozen dataclass of float terms, each ``NAME + _unit``, read as a mapping from NAME; a
    term that is None (not part of this model: the MoE dispatch of a dense one) is absent."""

    __slots__ = ()
    _unit: ClassVar[str]
    _names: ClassVar[tuple[str, ...]]
    _fields_of: ClassVar[Callable[[object], tuple[float | None, ...]]]

    def __getitem__(self, name: str) -> float:
        value = getattr(self, name + self._unit, None) if name in self._names else None
        if value is None:
            raise KeyError(name)
        return float(value)

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._names if getattr(self, name + self._unit) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.items())!r})"

    @property
    def total(self) -> float:
        """The terms summed in their order (left to right: the same float as ``sum(values())``,
        read in one call instead of through the mapping protocol)."""
        total = 0.0
        for value in type(self)._fields_of(self):
            if value is not None:
                total += value
        return total

    @classmethod
    def of(cls: type[B], terms: Mapping[str, float]) -> B:
        """Build from a mapping of term names (without the unit) to values."""
        unknown = sorted(set(terms) - set(cls._names))
        if unknown:
            raise SpecError(cls.__name__, f"unknown term(s) {', '.join(unknown)}", f"use: {', '.join(cls._names)}")
        return cls(**{name + cls._unit: value for name, value in terms.items()})


def _names(cls: type[_Breakdown], unit: str) -> tuple[str, ...]:
    return tuple(f.name[: -len(unit)] for f in fields(cls))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True, eq=False)
class TimeBreakdown(_Breakdown):
    """Exposed seconds of each term of one iteration (:func:`search.predict`); they add up to its
    iteration time. Equal to any mapping with the same terms (a dict compares equal)."""

    compute_s: float
    """GEMMs, attention and element-wise kernels of every micro-batch (and the LM head)."""
    host_overhead_s: float
    """Per-micro-batch host time (launches, the pipeline engine's own where it schedules)."""
    recompute_s: float
    """Forward passes repeated for activation recomputation."""
    tp_comm_s: float
    """Tensor-parallel collectives not hidden behind GEMMs."""
    cp_comm_s: float
    """Context-parallel K/V exchange not hidden behind attention."""
    zero3_comm_s: float
    """ZeRO-3 / FSDP parameter gathers and gradient reduce-scatters not hidden behind compute."""
    offload_transfer_s: float
    """PCIe/NVMe traffic of offloaded states and activations not hidden behind compute."""
    pipeline_bubble_s: float
    """Pipeline warm-up and cool-down."""
    pp_p2p_s: float
    """Pipeline point-to-point transfers not overlapped."""
    dp_comm_s: float
    """Data-parallel gradient reduction (and parameter gather) not overlapped."""
    optimizer_s: float
    """The optimizer step on the GPU."""
    offload_step_s: float
    """The part of a CPU optimizer step the GPU waits for."""
    ep_comm_s: float | None = None
    """Expert-parallel token dispatch and combine (MoE models; None, and absent, for dense ones)."""

    _unit: ClassVar[str] = "_s"


@dataclass(frozen=True, slots=True, eq=False)
class MemoryBreakdown(_Breakdown):
    """Bytes of each component of one GPU's peak (:mod:`search._memory_plan`); they add up to the peak."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_states_bytes: float
    gathered_params_bytes: float
    """Parameters gathered by ZeRO-3 / FSDP for the running (and prefetched) block."""
    activations_bytes: float
    """Stored activations of the micro-batches in flight, the working layer, buffers and logits."""
    comm_buffers_bytes: float
    """ZeRO bucket buffers (DeepSpeed)."""
    runtime_overhead_bytes: float
    """CUDA context, allocator and library workspaces (fitted)."""

    _unit: ClassVar[str] = "_bytes"


for _cls, _unit in ((TimeBreakdown, "_s"), (MemoryBreakdown, "_bytes")):
    _cls._names = _names(_cls, _unit)
    _cls._fields_of = attrgetter(*(name + _unit for name in _cls._names))

