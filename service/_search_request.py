"""A search request turned into specs: checked before it is queued, stored, hashed, and rebuilt by
the worker and the launch endpoint.

Everything a worker could fail on is checked while the client waits (unknown presets, shapes the
specs refuse, a precision the GPU lacks, a node count or batch no configuration can use), so a bad
request is a 422 and nothing is stored. The stored request holds the *resolved* model and cluster
(the preset figures of this autopar version), so a worker of another version searches what was
asked; a hardware profile is stored by id (profiles are immutable and cannot be deleted while a
search refers to them) and applied again where the specs are rebuilt.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from search import (
    ClusterSpec,
    GPUSpec,
    ModelSpec,
    NodeSpec,
    SpecError,
    TrainingSpec,
    UnknownPresetError,
    apply_profile,
    enumerate_space,
    staleness,
)
from search._fabric import NON_BLOCKING, fabric_dict, fabric_from_dict
from search._predict import check_precision
from search._search import check_cuda_graphs, check_moe_exchange
from service._calibrations import Chosen, choose
from service._calibrations import from_stored as stored_calibration
from service._settings import Settings
from service.request import Runtime, SearchIn, cluster_spec, load_profile, model_spec
from service.store import Database

_SPEC_FIELDS = {"ModelSpec": "model.shape", "GPUSpec": "cluster.gpu", "NodeSpec": "cluster.node",
                "ClusterSpec": "cluster", "TrainingSpec": "training"}
_ATTR_FIELDS = {"num_nodes": "nodes"}


def init_fields(obj: Any) -> dict[str, Any]:
    """A dataclass's constructor arguments as JSON-ready data (``asdict`` would add derived
    ``init=False`` fields); nested specs (``ModelSpec.moe``, ``.mla``) become objects."""
    return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj) if f.init}


def _plain(value: Any) -> Any:
    return init_fields(value) if is_dataclass(value) and not isinstance(value, type) else value


def _cluster_fields(c: ClusterSpec) -> dict[str, Any]:
    return {"gpu": init_fields(c.gpu), "node": init_fields(c.node), "num_nodes": c.num_nodes, "name": c.name,
            "fabric": fabric_dict(c.fabric)}


def request_field(err: SpecError) -> SpecError:
    """``err`` with a spec field (``GPUSpec(x).memory_bytes``) renamed to the request's path
    (``cluster.gpu.memory_bytes``), so the 422 names what the client sent."""
    owner, dot, attr = err.field.partition(".")
    prefix = _SPEC_FIELDS.get(owner.split("(", 1)[0])
    if prefix is None or not dot:
        return err
    return SpecError(f"{prefix}.{_ATTR_FIELDS.get(attr, attr)}", err.problem, err.fix)


@dataclass(frozen=True, slots=True)
class ResolvedSearch:
    """A search request with its specs."""

    body: SearchIn
    model: ModelSpec
    base_cluster: ClusterSpec
    """The preset (or custom) figures, before a profile is applied: what is stored and hashed."""
    cluster: ClusterSpec
    """What the search runs on: ``base_cluster`` with the profile's measurements, at the
    calibration's GPU rates."""
    notes: tuple[str, ...] = ()
    """Figures the profile did not measure, and which calibration is used."""
    calibration: Chosen = field(default_factory=lambda: stored_calibration(None))
    """The cost model's constants: the request's calibration_id, else the cluster's latest, else published."""

    @property
    def training(self) -> TrainingSpec:
        """The search's training, for its Megatron-Core configurations (the only runtime that may
        reduce gradients in bf16); :meth:`training_for` gives another runtime's."""
        return self.training_for("megatron")

    def training_for(self, framework: Runtime) -> TrainingSpec:
        """The TrainingSpec a ranked configuration of ``framework`` was predicted with (a search
        with ``grad_reduce_in_bf16`` ranks Megatron-Core configurations only)."""
        t = self.body.training
        return TrainingSpec(t.global_batch, t.precision, framework=framework,
                            grad_reduce_in_bf16=t.grad_reduce_in_bf16 and framework == "megatron")

    def stored(self, autopar_version: str) -> dict[str, Any]:
        """What ``Search.request`` holds."""
        return {"body": self.body.model_dump(mode="json"), "model": init_fields(self.model),
                "cluster": _cluster_fields(self.base_cluster), "profile_id": self.body.cluster.profile_id,
                "notes": list(self.notes), "calibration": self.calibration.stored(),
                "autopar_version": autopar_version}

    def request_hash(self, autopar_version: str) -> str:
        """SHA-256 of everything that decides the answer: identical requests share one search.

        The price counts only for the cost objective (the others ignore it). The calibration counts
        by its constants (not by how it was named): the same request under another calibration is
        another search, and naming the calibration the default would pick is the same one."""
        b = self.body
        key = {"model": init_fields(self.model), "cluster": _cluster_fields(self.base_cluster),
               "profile_id": b.cluster.profile_id, "training": _training_key(b),
               "framework": b.framework, "objective": b.objective, "top": b.top,
               "budget": b.budget.model_dump(mode="json"),
               "price_per_gpu_hour": b.price_per_gpu_hour if b.objective == "cost" else None,
               "min_headroom_gib": b.min_headroom_gib, "allow_untested": b.allow_untested,
               "allow_tiling": b.allow_tiling, "host_safety_factor": b.host_safety_factor,
               "calibration": self.calibration.fingerprint(), "autopar_version": autopar_version}
        if b.moe_dispatcher != "alltoall" or b.moe_a2a_overlap:  # absent when unset: older hashes still match
            key["moe_exchange"] = f"{b.moe_dispatcher}{'+overlap' if b.moe_a2a_overlap else ''}"
        if b.cuda_graphs != "none":  # likewise
            key["cuda_graphs"] = b.cuda_graphs
        text = json.dumps(key, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def search_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``search.search`` after (model, cluster, global_batch)."""
        b = self.body
        return {"precision": b.training.precision, "grad_reduce_in_bf16": b.training.grad_reduce_in_bf16,
                "framework": b.framework, "objective": b.objective,
                "top_k": b.top, "seed": b.budget.seed, "n_trials": b.budget.n_trials,
                "timeout_s": b.budget.timeout_s, "price_per_gpu_hour": b.price_per_gpu_hour,
                "min_headroom_bytes": b.min_headroom_gib * 2**30, "allow_untested": b.allow_untested,
                "allow_tiling": b.allow_tiling, "host_safety_factor": b.host_safety_factor,
                "moe_dispatcher": b.moe_dispatcher, "moe_a2a_overlap": b.moe_a2a_overlap,
                "cuda_graphs": b.cuda_graphs, "calibration": self.calibration.calibration}


def _training_key(body: SearchIn) -> dict[str, Any]:
    """The training as the request hash reads it: ``grad_reduce_in_bf16`` only when set, so a request
    without it hashes as it did before the field existed (and still finds the searches stored then)."""
    key = body.training.model_dump(mode="json")
    if not key["grad_reduce_in_bf16"]:
        del key["grad_reduce_in_bf16"]
    return key


def _check_limits(body: SearchIn, settings: Settings) -> None:
    if body.top > settings.max_top:
        raise SpecError("top", f"{body.top} is above this service's limit of {settings.max_top}",
                        f"ask for at most {settings.max_top} configurations")
    if body.budget.n_trials is not None and body.budget.n_trials > settings.max_trials:
        raise SpecError("budget.n_trials", f"{body.budget.n_trials} is above this service's limit of "
                        f"{settings.max_trials}", f"give at most {settings.max_trials} trials")
    if body.budget.timeout_s is not None and body.budget.timeout_s > settings.max_timeout_s:
        raise SpecError("budget.timeout_s", f"{body.budget.timeout_s:g} s is above this service's limit of "
                        f"{settings.max_timeout_s:g} s", f"give at most {settings.max_timeout_s:g} seconds")
    if body.objective == "cost" and body.price_per_gpu_hour is None:
        raise SpecError("price_per_gpu_hour", "the cost objective needs the price of a GPU-hour",
                        "add price_per_gpu_hour (e.g. 2.5), or use objective throughput")


def _specs(body: SearchIn, db: Database) -> tuple[ModelSpec, ClusterSpec]:
    try:
        model = model_spec(body.model)
        base = cluster_spec(body.cluster.model_copy(update={"profile_id": None}), db)[0]
        # Batch, precision, and bf16 gradient reduction: Megatron-Core's (framework any searches it alone), not fp16.
        TrainingSpec(body.training.global_batch, body.training.precision,
                     framework="megatron" if body.framework == "any" else body.framework,
                     grad_reduce_in_bf16=body.training.grad_reduce_in_bf16)
        check_precision(base.gpu, body.training.precision)  # the GPU has the recipe's tensor cores
        check_moe_exchange(model, body.framework, body.moe_dispatcher, body.moe_a2a_overlap)
        check_cuda_graphs(body.framework, body.cuda_graphs)
    except UnknownPresetError as err:
        kind = "model" if err.kind == "model" else "cluster"  # cluster presets are named after their node
        raise SpecError(f"{kind}.preset", f"unknown {kind} preset {err.name!r}",
                        f"choose one of: {', '.join(err.known)} (GET /v1/presets/{kind}s)") from None
    except SpecError as err:
        raise request_field(err) from None
    return model, base


def check_usable(model: ModelSpec, cluster: ClusterSpec, global_batch: int, framework: str) -> None:
    """Raise a SpecError naming ``cluster.nodes`` or ``training.global_batch`` unless at least one
    configuration is valid.

    Micro-batch 1 divides every per-rank batch, so enumerating with it alone answers the question at
    a tenth of the cost of the full space (tens of milliseconds for 1024 GPUs)."""
    world = cluster.world_size
    if enumerate_space(model, world, global_batch, framework, micro_batches=(1,)).candidates:
        return
    # A batch of `world` sequences splits over every data-parallel degree: what layouts exist at all?
    dps = sorted({c.config.dp for c in enumerate_space(model, world, world, framework, (1,)).candidates})
    where = f"{cluster.num_nodes} node{'s' if cluster.num_nodes > 1 else ''} ({world} GPUs)"
    if not dps:
        raise SpecError("cluster.nodes", f"no configuration of {model.name} runs on {where} with framework "
                        f"{framework}", "change the node count, or use framework any")
    if global_batch < dps[0]:
        raise SpecError("cluster.nodes", f"{model.name} with framework {framework} on {where} has at least "
                        f"{dps[0]} data-parallel ranks, more than the {global_batch} sequences of a step",
                        f"use fewer nodes, or a global_batch that is a multiple of {dps[0]}")
    shown = ", ".join(str(d) for d in dps[:12]) + (", ..." if len(dps) > 12 else "")
    suggestion = -(-global_batch // dps[0]) * dps[0]
    raise SpecError("training.global_batch", f"{global_batch} is not a multiple of any data-parallel degree that "
                    f"{model.name} allows on {where} with framework {framework} ({shown})",
                    f"use a multiple of one of them, e.g. {suggestion}")


def resolve(body: SearchIn, db: Database, settings: Settings) -> ResolvedSearch:
    """Check a new request against the service's limits and the specs; SpecError (422) otherwise."""
    _check_limits(body, settings)
    model, base = _specs(body, db)
    check_usable(model, base, body.training.global_batch, body.framework)
    cluster: ClusterSpec = base
    notes: tuple[str, ...] = ()
    if body.cluster.profile_id is not None:
        profile = load_profile(db, body.cluster.profile_id)
        # the same warnings `autopar search --profile` and POST /v1/predict give (age, GPU, node size)
        stale = tuple(f"stale profile: {why}" for why in staleness(profile, base))
        cluster, fallbacks = apply_profile(base, profile)
        notes = stale + tuple(fallbacks)
    chosen = choose(db, calibration_id=body.calibration_id, cluster=base.name, profile_id=body.cluster.profile_id)
    return ResolvedSearch(body, model, base, chosen.apply(cluster), (*notes, chosen.note()), chosen)


def from_stored(doc: dict[str, Any], db: Database) -> ResolvedSearch:
    """Rebuild the specs of a stored request (``ResolvedSearch.stored``), profile applied."""
    body = SearchIn.model_validate(doc["body"])
    c = doc["cluster"]
    # Searches stored before the fabric was (issue 15) ran on one non-blocking tier.
    fabric = fabric_from_dict(c["fabric"], "cluster.fabric") if "fabric" in c else NON_BLOCKING
    base = ClusterSpec(gpu=GPUSpec(**c["gpu"]), node=NodeSpec(**c["node"]), num_nodes=int(c["num_nodes"]),
                       name=str(c["name"]), fabric=fabric)
    cluster: ClusterSpec = base
    notes: tuple[str, ...] = ()
    if doc.get("profile_id"):
        cluster, notes = apply_profile(base, load_profile(db, str(doc["profile_id"])))
    chosen = stored_calibration(doc.get("calibration"))
    return ResolvedSearch(body, ModelSpec(**doc["model"]), base, chosen.apply(cluster), tuple(notes), chosen)
