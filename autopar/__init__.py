"""autopar for Python programs: predict one parallel training configuration, or search for the best.

    import autopar

    model = autopar.model_preset("llama3-8b")
    cluster = autopar.cluster_preset("dgx-h100", num_nodes=2)
    training = autopar.TrainingSpec(global_batch=512)
    p = autopar.predict(model, cluster, autopar.ParallelConfig(dp=4, tp=4, micro_batch=1), training)
    print(p.iteration_time_s, p.peak_memory_bytes_per_gpu)
    best = autopar.search(model, cluster, 512, top_k=3)
    print(best.top[0].config)

A facade over the core (``search``): the same functions and specs, under a name that is autopar's
alone. Importing it loads neither torch nor the service (FastAPI, SQLAlchemy) nor the profiler.
Bad input raises :class:`SpecError` (a :class:`AutoparError`) naming the field, the problem and the fix.
"""

from importlib.metadata import PackageNotFoundError, version

from search import (
    CLUSTER_PRESETS,
    MODEL_PRESETS,
    AutoparError,
    ClusterSpec,
    GPUSpec,
    ModelSpec,
    NodeSpec,
    ParallelConfig,
    Prediction,
    RankedConfig,
    SearchResult,
    SpecError,
    TrainingSpec,
    UnknownPresetError,
    cluster_preset,
    describe,
    gpu_preset,
    model_from_hf_config,
    model_preset,
    node_preset,
    predict,
    predict_memory,
    search,
)

try:
    __version__ = version("autopar")
except PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0+unknown"

__all__ = [
    "CLUSTER_PRESETS",
    "MODEL_PRESETS",
    "AutoparError",
    "ClusterSpec",
    "GPUSpec",
    "ModelSpec",
    "NodeSpec",
    "ParallelConfig",
    "Prediction",
    "RankedConfig",
    "SearchResult",
    "SpecError",
    "TrainingSpec",
    "UnknownPresetError",
    "__version__",
    "cluster_preset",
    "describe",
    "gpu_preset",
    "model_from_hf_config",
    "model_preset",
    "node_preset",
    "predict",
    "predict_memory",
    "search",
]
