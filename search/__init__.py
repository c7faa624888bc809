"""autopar's core: specs, presets, the hardware-profile schema, the cost model and the search.

This package imports neither ``profiler`` nor ``service`` and never imports torch.
"""

from search._calibration import Calibration, default_calibration
from search._cluster_presets import CLUSTER_PRESETS, cluster_preset, gpu_preset, node_preset
from search._cluster_spec import ClusterSpec, GPUSpec, NodeSpec
from search._errors import AutoparError, SpecError, UnknownPresetError
from search._fabric import Fabric, FabricTier
from search._hf_config import HF_ARCHITECTURES, model_from_hf_config
from search._model_presets import MODEL_PRESET_PARAMS, MODEL_PRESETS, model_preset
from search._model_spec import LAUNCH_ONLY_FIELDS, ModelSpec
from search._parallel_spec import ParallelConfig, TrainingSpec, check_compatible
from search._predict import predict, predict_memory, time_lower_bound_s
from search._prediction import Prediction
from search._profile import (
    SCHEMA_VERSION,
    Fingerprint,
    GemmSample,
    HardwareProfile,
    LinkFit,
    apply_profile,
    fit_alpha_beta,
    staleness,
)
from search._search import OBJECTIVES, describe, search
from search._search_result import RankedConfig, SearchResult
from search._space import FRAMEWORK_TARGETS, Candidate, Space, enumerate_space

__all__ = [
    "CLUSTER_PRESETS",
    "FRAMEWORK_TARGETS",
    "HF_ARCHITECTURES",
    "LAUNCH_ONLY_FIELDS",
    "MODEL_PRESETS",
    "MODEL_PRESET_PARAMS",
    "OBJECTIVES",
    "SCHEMA_VERSION",
    "AutoparError",
    "Calibration",
    "Candidate",
    "ClusterSpec",
    "Fabric",
    "FabricTier",
    "Fingerprint",
    "GPUSpec",
    "GemmSample",
    "HardwareProfile",
    "LinkFit",
    "ModelSpec",
    "NodeSpec",
    "ParallelConfig",
    "Prediction",
    "RankedConfig",
    "SearchResult",
    "Space",
    "SpecError",
    "TrainingSpec",
    "UnknownPresetError",
    "apply_profile",
    "check_compatible",
    "cluster_preset",
    "default_calibration",
    "describe",
    "enumerate_space",
    "fit_alpha_beta",
    "gpu_preset",
    "model_from_hf_config",
    "model_preset",
    "node_preset",
    "predict",
    "predict_memory",
    "search",
    "staleness",
    "time_lower_bound_s",
]
