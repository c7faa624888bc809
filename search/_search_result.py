"""What a search returns: ranked configurations, the Pareto front, counts and hints."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from search._parallel_spec import ParallelConfig
from search._prediction import Prediction
from search._units import GiB


@dataclass(frozen=True, slots=True)
class RankedConfig:
    """One configuration with its prediction and a one-line reason for its place."""

    rank: int
    framework: str
    config: ParallelConfig
    prediction: Prediction
    score: float
    """The objective value it was ranked by (tokens/s, or $ per million tokens)."""
    equivalent_to_best: bool = False
    """Its score is within the model's error band of the best score: the data cannot tell them apart."""
    note: str = ""
    """Why it stands where it does when that is not its score alone (equivalence, simplicity)."""

    @property
    def explanation(self) -> str:
        """One line: throughput, MFU, bottleneck term and memory headroom."""
        p = self.prediction
        share = p.time_breakdown_s[p.bottleneck] / p.iteration_time_s
        return (f"{p.tokens_per_s:,.0f} tokens/s, MFU {p.mfu:.1%}; largest term {p.bottleneck} ({share:.0%} of "
                f"{p.iteration_time_s:.2f} s); {p.memory_headroom_bytes / GiB:.1f} GiB headroom")

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "framework": self.framework,
            "config": asdict(self.config),
            "score": self.score,
            "equivalent_to_best": self.equivalent_to_best,
            "note": self.note,
            "explanation": self.explanation,
            "prediction": self.prediction.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The answer of :func:`search.search`."""

    model: str
    cluster: str
    num_nodes: int
    world_size: int
    framework: str
    objective: str
    top: tuple[RankedConfig, ...]
    pareto: tuple[RankedConfig, ...]
    """Configurations no other beats on both tokens/s and memory headroom."""
    space_size: int
    """Raw product of the per-dimension choices."""
    n_valid: int
    """Configurations the model, batch and runtime allow."""
    n_feasible: int
    """Valid configurations that fit in GPU, host and NVMe memory: all of them when the search is
    exhaustive (every memory is checked), else among those the sampler evaluated."""
    n_evaluated: int
    """Configurations evaluated by the search proper: timed when they fit. An exhaustive sweep
    times only fitting configurations, skipping those whose optimistic throughput bound can
    neither enter the top k (nor the best one's error band) nor the Pareto front."""
    exhaustive: bool
    """True when the ranking, the counts and the Pareto front are exact: every valid
    configuration's memory was checked, and every fitting one was timed or proven by the
    throughput bound (:func:`search.time_lower_bound_s`) unable to enter the top k, the
    equivalence band or the front. False when sampled: the counts and the front are then those
    of the evaluated configurations (lower bounds)."""
    elapsed_s: float
    study_name: str
    hints: tuple[str, ...] = ()
    """Why the closest configurations fail and what would fit, when few or none fit."""

    @property
    def best(self) -> RankedConfig | None:
        return self.top[0] if self.top else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "cluster": self.cluster,
            "num_nodes": self.num_nodes,
            "world_size": self.world_size,
            "framework": self.framework,
            "objective": self.objective,
            "space_size": self.space_size,
            "n_valid": self.n_valid,
            "n_feasible": self.n_feasible,
            "n_evaluated": self.n_evaluated,
            "exhaustive": self.exhaustive,
            "elapsed_s": self.elapsed_s,
            "study_name": self.study_name,
            "hints": list(self.hints),
            "top": [r.to_dict() for r in self.top],
            "pareto": [r.to_dict() for r in self.pareto],
        }
