"""Turn request bodies into search specs; every problem is a SpecError (-> 422 naming the field)."""

from __future__ import annotations

import dataclasses

from search import (
    ClusterSpec,
    GPUSpec,
    HardwareProfile,
    ModelSpec,
    NodeSpec,
    ParallelConfig,
    SpecError,
    apply_profile,
    cluster_preset,
    model_from_hf_config,
    model_preset,
)
from search._fabric import Fabric, FabricTier
from service.request._schemas import ClusterIn, ConfigIn, FabricIn, ModelIn, ModelShape
from service.store import Database, profile_body


def model_spec(m: ModelIn) -> ModelSpec:
    if m.hf_config is not None:
        name = m.name or str(m.hf_config.get("_name_or_path") or f"hf-{m.hf_config.get('model_type')}")
        try:
            return model_from_hf_config(m.hf_config, name=name.rstrip("/").rsplit("/", 1)[-1][:100] or "hf",
                                        seq_len=m.seq_len)[0]
        except SpecError as err:  # name the request's field
            key = err.field.removeprefix("config.json").strip()
            where = ("model.hf_config" + (f".{key}" if key else "")) if err.field.startswith("config.json") else (
                f"model.{err.field}")
            raise SpecError(where, err.problem, err.fix) from None
    if m.preset is not None:
        spec = model_preset(m.preset)
    elif m.shape is not None:
        spec = ModelSpec(**m.shape.model_dump())
    else:  # the schema's validator makes this unreachable
        raise SpecError("model", "neither preset, shape nor hf_config", "give one")
    return spec if m.seq_len is None else dataclasses.replace(spec, seq_len=m.seq_len)


def model_shape(spec: ModelSpec) -> ModelShape:
    """The request shape of ``spec`` (valid as ``model.shape``; ``head_dim`` resolved, ``moe``, ``mla`` and
    ``rope_yarn`` as objects)."""
    data = {f: getattr(spec, f) for f in ModelShape.model_fields}
    for part in ("moe", "mla", "rope_yarn"):
        if data[part] is not None:
            data[part] = dataclasses.asdict(data[part])
    return ModelShape.model_validate(data)


def load_profile(db: Database, profile_id: str) -> HardwareProfile:
    with db.session() as s:
        body = profile_body(s, profile_id=profile_id)
    if body is None:
        raise SpecError("cluster.profile_id", f"no stored profile {profile_id!r}",
                        "upload it first (POST /v1/profiles or `autopar profile --upload`), or drop profile_id")
    return HardwareProfile.from_dict(body)


def cluster_spec(c: ClusterIn, db: Database) -> tuple[ClusterSpec, tuple[str, ...]]:
    """The cluster and the notes of applying its profile (figures the profile did not measure)."""
    if c.preset is not None:
        cluster = cluster_preset(c.preset, c.nodes)
    else:
        if c.gpu is None or c.node is None:
            raise SpecError("cluster", "custom clusters need gpu and node", "give both")
        cluster = ClusterSpec(gpu=GPUSpec(**c.gpu.model_dump()), node=NodeSpec(**c.node.model_dump()),
                              num_nodes=c.nodes, name=f"{c.gpu.name}x{c.node.gpus_per_node}")
    if c.fabric is not None:
        fabric = fabric_spec(c.fabric)
        try:
            cluster = dataclasses.replace(cluster, fabric=fabric)
        except SpecError as err:  # a leaf that splits an NVLink domain
            raise SpecError(err.field.replace("ClusterSpec.", "cluster."), err.problem, err.fix) from None
    if c.profile_id is None:
        return cluster, ()
    return apply_profile(cluster, load_profile(db, c.profile_id))


def fabric_spec(f: FabricIn) -> Fabric:
    """The request's fabric; a rule the schema cannot say (tier order, nested node counts, the leaf's
    line rate) is a SpecError naming ``cluster.fabric...`` (422)."""
    try:
        return Fabric(tuple(FabricTier(**t.model_dump()) for t in f.tiers), sharp=f.sharp)
    except SpecError as err:
        where = err.field.replace("Fabric.", "").replace("FabricTier(", "tiers.").replace(")", "")
        raise SpecError(f"cluster.fabric.{where}", err.problem, err.fix) from None


def derived_dp(world_size: int, *, tp: int, pp: int, cp: int, field: str, fix: str) -> int:
    """The data-parallel degree of a configuration that leaves it out: the GPUs over tp*pp*cp (the
    expert degrees fold into tp*cp*dp); a SpecError naming ``field`` when the product does not divide
    them. One rule for the API's requests and ``autopar predict``'s options."""
    mp = tp * pp * cp
    if world_size % mp:
        raise SpecError(field, f"cannot derive dp: the cluster's {world_size} GPUs are not divisible by "
                        f"tp*pp*cp = {tp}*{pp}*{cp} = {mp}", fix)
    return world_size // mp


def parallel_config(c: ConfigIn, world_size: int) -> ParallelConfig:
    """The request's configuration, dp derived when it is left out."""
    data = c.model_dump()
    if data["dp"] is None:
        data["dp"] = derived_dp(world_size, tp=c.tp, pp=c.pp, cp=c.cp, field="config.dp",
                                fix="choose degrees whose product divides the GPU count, or give dp")
    return ParallelConfig(**data)
