"""Turn a ``--model`` / ``--cluster`` argument (a preset name or a JSON file) into a spec.

A model file is a JSON object with :class:`search.ModelSpec`'s fields (and optionally ``params``,
which must then equal the count of that shape: ``autopar presets --json`` prints it), or, as
``hf:PATH``, a Hugging Face ``config.json`` (or the directory holding one) read by
:func:`search.model_from_hf_config`. ``--seq-len`` replaces the sequence length of either. A cluster file is
``{"gpu": {GPUSpec fields}, "node": {NodeSpec fields}, "num_nodes": N}`` (``num_nodes`` and
``name`` optional), the same shape ``autopar presets --json`` prints for each cluster preset.
A missing ``name`` defaults to the file's stem. Every problem raises :class:`search.SpecError`
naming the option and the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from search import ClusterSpec, GPUSpec, ModelSpec, NodeSpec, SpecError, cluster_preset, model_from_hf_config
from search._fabric import NON_BLOCKING, fabric_from_dict
from search._model_presets import model_preset

HF_PREFIX = "hf:"

T = TypeVar("T")


def is_spec_file(arg: str) -> bool:
    """True when ``arg`` names a file rather than a preset: ends in ``.json``, has a path separator, or exists."""
    return arg.endswith(".json") or "/" in arg or "\\" in arg or Path(arg).is_file()


def init_fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    """The constructor's fields of dataclass ``cls`` (``asdict`` would add derived ``init=False`` ones)."""
    return {f.name: f for f in dataclasses.fields(cls) if f.init}


def spec_dict(spec: object) -> dict[str, Any]:
    """A spec's constructor arguments: what a ``--model`` / ``--cluster`` file holds."""
    return {name: getattr(spec, name) for name in init_fields(type(spec))}


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
    fields = init_fields(cls)
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


def _hf_model(arg: str, seq_len: int | None, notes: list[str]) -> ModelSpec:
    path = Path(arg.removeprefix(HF_PREFIX))
    if path.is_dir():
        path = path / "config.json"
    data = read_json_object("--model", str(path))
    spec, said = model_from_hf_config(data, name=path.parent.name or path.stem, seq_len=seq_len)
    notes.extend(said)
    return spec


def load_model(arg: str, seq_len: int | None = None, notes: list[str] | None = None) -> ModelSpec:
    """The model preset ``arg``, the :class:`ModelSpec` in JSON file ``arg``, or the Hugging Face
    ``config.json`` of ``hf:PATH``; ``seq_len`` replaces its sequence length. What was assumed
    (a sequence length taken from the file, ...) is appended to ``notes``."""
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0):
        raise SpecError("--seq-len", f"{seq_len!r} is not a positive integer", "give the training sequence length")
    if arg.startswith(HF_PREFIX):
        return _hf_model(arg, seq_len, [] if notes is None else notes)
    if not is_spec_file(arg):
        spec = model_preset(arg)
    else:
        data = read_json_object("--model", arg)
        params = data.pop("params", None)
        spec = build_spec(ModelSpec, f"--model {arg}", data, Path(arg).stem)
        if params is not None and params != spec.params:
            raise SpecError(f"--model {arg} params", f"{params!r} is not the {spec.params:,} parameters of the shape "
                            "in the file", "drop params (it is derived from the shape) or fix the shape")
    return spec if seq_len is None else dataclasses.replace(spec, seq_len=seq_len)


def load_cluster(arg: str, num_nodes: int | None) -> ClusterSpec:
    """The cluster preset or JSON file ``arg``; ``num_nodes`` overrides the file's (default 1)."""
    if not is_spec_file(arg):
        return cluster_preset(arg, 1 if num_nodes is None else num_nodes)
    data = read_json_object("--cluster", arg)
    where = f"--cluster {arg}"
    unknown = sorted(set(data) - {"gpu", "node", "num_nodes", "name", "fabric"})
    if unknown:
        raise SpecError(where, f"unknown key(s) {', '.join(unknown)}",
                        'write {"gpu": {...}, "node": {...}, "num_nodes": N} (num_nodes, name and fabric optional)')
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
    fabric = NON_BLOCKING if "fabric" not in data else fabric_from_dict(data["fabric"], f"{where} fabric")
    return ClusterSpec(gpu=gpu, node=node, num_nodes=nodes, name=name, fabric=fabric)


def parse_choices(text: str, choices: Sequence[str], option: str, noun: str) -> tuple[str, ...]:
    """A comma-separated option value as known ``choices``, or a SpecError naming the unknown ones."""
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [part for part in chosen if part not in choices]
    if unknown or not chosen:
        raise SpecError(option, f"{', '.join(unknown) or 'nothing'} is not {noun}",
                        f"choose from: {', '.join(choices)}")
    return chosen


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """``--model`` and ``--seq-len`` (predict and search)."""
    p.add_argument("--model", required=True, metavar="NAME|FILE.json|hf:PATH",
                   help="model preset, ModelSpec JSON file, or hf:PATH to a Hugging Face config.json (or its "
                        "directory) of a dense llama, mistral, qwen2, qwen3, gpt2, gpt_neox or bloom model")
    p.add_argument("--seq-len", type=int, metavar="N",
                   help="training sequence length (default: the preset's or file's; a config.json's "
                        "max_position_embeddings)")


def model_argument(args: argparse.Namespace) -> ModelSpec:
    """The model of ``--model`` / ``--seq-len``; what was assumed goes to stderr as notes."""
    notes: list[str] = []
    spec = load_model(args.model, args.seq_len, notes)
    for note in notes:
        print(f"autopar: note: {note}", file=sys.stderr)
    return spec
