"""Turn a ``--model`` / ``--cluster`` argument (a preset name or a JSON file) into a spec.

A model file is a JSON object with :class:`search.ModelSpec`'s fields. A cluster file is
``{"gpu": {GPUSpec fields}, "node": {NodeSpec fields}, "num_nodes": N}`` (``num_nodes`` and
``name`` optional), the same shape ``autopar presets --json`` prints for each cluster preset.
A missing ``name`` defaults to the file's stem. Every problem raises :class:`search.SpecError`
naming the option and the file.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from search import ClusterSpec, GPUSpec, ModelSpec, NodeSpec, SpecError, cluster_preset
from search._model_presets import model_preset

T = TypeVar("T")


def is_spec_file(arg: str) -> bool:
    """True when ``arg`` names a file rather than a preset: ends in ``.json``, has a path separator, or exists."""
    return arg.endswith(".json") or "/" in arg or "\\" in arg or Path(arg).is_file()


def read_json_object(option: str, arg: str) -> dict[str, Any]:
    """The JSON object in file ``arg``; ``option`` (e.g. ``--model``) names the source in errors."""
    path = Path(arg)
    if not path.is_file():
        problem = f"{arg} is a directory" if path.is_dir() else f"file {arg} does not exist"
        raise SpecError(option, problem, "give a preset name (see `autopar presets`) or the path of a JSON file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(option, f"cannot read {arg} ({exc})", "check the file's permissions and encoding") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(option, f"{arg} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                        "fix the file's syntax") from None
    if not isinstance(data, dict):
        raise SpecError(option, f"{arg} holds a JSON {type(data).__name__}, not an object",
                        "write the spec's fields as one JSON object")
    return data


def build_spec(cls: type[T], where: str, data: object, default_name: str) -> T:
    """``cls(**data)`` after checking the keys, so a typo is reported by field name, not as a TypeError."""
    if not isinstance(data, dict):
        raise SpecError(where, f"a JSON {type(data).__name__} where an object was expected",
                        f"give {cls.__name__}'s fields as an object")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    data = {"name": default_name, **data} if "name" in fields else dict(data)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise SpecError(where, f"unknown field(s) {', '.join(unknown)}",
                        f"{cls.__name__} has the fields: {', '.join(fields)}")
    missing = [name for name, f in fields.items() if name not in data and f.init
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise SpecError(where, f"missing field(s) {', '.join(missing)}", f"add them ({cls.__name__} needs every one)")
    return cls(**data)


def load_model(arg: str) -> ModelSpec:
    """The model preset ``arg``, or the :class:`ModelSpec` in JSON file ``arg``."""
    if not is_spec_file(arg):
        return model_preset(arg)
    data = read_json_object("--model", arg)
    return build_spec(ModelSpec, f"--model {arg}", data, Path(arg).stem)


def load_cluster(arg: str, num_nodes: int | None) -> ClusterSpec:
    """The cluster preset or JSON file ``arg``; ``num_nodes`` overrides the file's (default 1)."""
    if not is_spec_file(arg):
        return cluster_preset(arg, 1 if num_nodes is None else num_nodes)
    data = read_json_object("--cluster", arg)
    where = f"--cluster {arg}"
    unknown = sorted(set(data) - {"gpu", "node", "num_nodes", "name"})
    if unknown:
        raise SpecError(where, f"unknown key(s) {', '.join(unknown)}",
                        'write {"gpu": {...}, "node": {...}, "num_nodes": N} (num_nodes and name optional)')
    for key in ("gpu", "node"):
        if key not in data:
            raise SpecError(where, f'no "{key}" object', 'write {"gpu": {...}, "node": {...}, "num_nodes": N}')
    stem = Path(arg).stem
    gpu = build_spec(GPUSpec, f"{where} gpu", data["gpu"], f"{stem}-gpu")
    node = build_spec(NodeSpec, f"{where} node", data["node"], f"{stem}-node")
    nodes = data.get("num_nodes", 1) if num_nodes is None else num_nodes
    name = data.get("name", stem)
    if not isinstance(name, str):
        raise SpecError(f"{where} name", f"{name!r} is not a string", "give the cluster a name")
    return ClusterSpec(gpu=gpu, node=node, num_nodes=nodes, name=name)


def parse_choices(text: str, choices: Sequence[str], option: str, noun: str) -> tuple[str, ...]:
    """A comma-separated option value as known ``choices``, or a SpecError naming the unknown ones."""
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [part for part in chosen if part not in choices]
    if unknown or not chosen:
        raise SpecError(option, f"{', '.join(unknown) or 'nothing'} is not {noun}",
                        f"choose from: {', '.join(choices)}")
    return chosen
