"""Run autopar's emitted arguments through the frameworks' own parsers; compare the flag lists.

Imports nothing of autopar, so it runs in the framework's environment:

* Megatron-LM (megatron-core >= 0.19 needs Python >= 3.12 and torch):
  ``python scripts/check_framework_parsers.py megatron-lm CASES.json``
* Megatron-DeepSpeed (a source tree; torch and deepspeed installed):
  ``python scripts/check_framework_parsers.py megatron-deepspeed CASES.json --source DIR``

CASES.json comes from ``scripts/dump_launch_args.py``. For each case of the framework it sets
``WORLD_SIZE``/``RANK``, calls ``parse_args`` and ``validate_args`` and compares the derived
values (data-parallel size, virtual pipeline size, ...) with the case's ``expect``. It also
compares the parser's long options with the committed flag list (``--flags``). Offline
workarounds, not upstream behaviour: Megatron-LM's ``get_device_arch_version`` (a CUDA query
when tp or cp > 1) is stubbed to 9 (Hopper); for Megatron-DeepSpeed, optional third-party
modules its imports pull in (transformers, apex, ...) are stubbed. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FLAG_FILES = {"megatron-lm": ROOT / "service/launch/megatron_flags.txt",
              "megatron-deepspeed": ROOT / "service/launch/megatron_deepspeed_flags.txt"}
FRAMEWORK_OF_CASE = {"megatron-lm": "megatron", "megatron-deepspeed": "megatron-deepspeed"}
_STUBBED = ("transformers", "apex", "transformer_engine", "flash_attn", "sentencepiece", "tiktoken", "einops",
            "nltk", "wandb", "tensorboard", "amp_C", "fused_layer_norm_cuda", "scaled_masked_softmax_cuda",
            "pybind11", "regex", "six")


class _AnyModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name == "__version__":
            return "99.0"
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda self, *a, **k: None})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name.split(".")[0] in _STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _AnyModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # type: ignore[attr-defined]


def _json(value: Any) -> Any:
    """A parsed value as the case file holds it (JSON has lists, not tuples: ``--window-size``)."""
    return list(value) if isinstance(value, tuple) else value


def _capture_parser(parse_args: Any) -> argparse.ArgumentParser:
    """The ArgumentParser ``parse_args`` builds (captured on its way to parsing ``--help``-free argv)."""
    captured: dict[str, argparse.ArgumentParser] = {}
    original = argparse.ArgumentParser.parse_args

    def spy(self: argparse.ArgumentParser, *a: Any, **k: Any) -> Any:
        captured["parser"] = self
        return original(self, *a, **k)

    argparse.ArgumentParser.parse_args = spy  # type: ignore[method-assign]
    try:
        sys.argv = ["pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                    "--micro-batch-size", "1", "--seq-length", "64", "--max-position-embeddings", "64"]
        with contextlib.redirect_stdout(io.StringIO()):
            parse_args()
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
    return captured["parser"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("framework", choices=sorted(FLAG_FILES))
    p.add_argument("cases", type=Path)
    p.add_argument("--source", type=Path, help="Megatron-DeepSpeed source tree")
    p.add_argument("--flags", type=Path, help="committed flag list to compare (default: the project's)")
    a = p.parse_args()
    if a.framework == "megatron-deepspeed":
        if a.source is None:
            p.error("--source DIR is required for megatron-deepspeed")
        sys.meta_path.insert(0, _StubFinder())
        sys.path.insert(0, str(a.source))
        from megatron.arguments import parse_args, validate_args  # type: ignore[import-not-found]
    else:
        import megatron.training.arguments as mta  # type: ignore[import-not-found]
        mta.get_device_arch_version = lambda: 9
        parse_args, validate_args = mta.parse_args, mta.validate_args

    parser = _capture_parser(parse_args)
    live = {s for s in parser._option_string_actions if s.startswith("--") and s != "--help"}
    flag_file = a.flags or FLAG_FILES[a.framework]
    lines = flag_file.read_text().splitlines()
    committed = {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}
    print(f"flag list {flag_file.name} ({lines[0]}): {len(committed)} flags; parser: {len(live)}")
    print(f"  in the parser, missing from the list: {sorted(live - committed)}")
    print(f"  in the list, not in this parser: {sorted(committed - live)}")

    cases = [c for c in json.loads(a.cases.read_text()) if c["framework"] == FRAMEWORK_OF_CASE[a.framework]]
    failures = 0
    for case in cases:
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        os.environ.update(WORLD_SIZE=str(case["world_size"]), RANK="0", LOCAL_RANK="0", **case.get("env", {}))
        sys.argv = ["pretrain_gpt.py", *case["argv"]]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                args = validate_args(parse_args())
            wrong = {k: (_json(getattr(args, k, "<missing>")), v) for k, v in case["expect"].items()
                     if _json(getattr(args, k, "<missing>")) != v}
            if wrong:
                failures += 1
                print(f"FAIL {case['name']}: (parsed, expected) {wrong}")
        except (Exception, SystemExit) as exc:
            failures += 1
            print(f"FAIL {case['name']}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
    print(f"{a.framework}: {len(cases) - failures}/{len(cases)} cases accepted with the expected values")
    return 1 if failures or not cases else 0


if __name__ == "__main__":
    sys.exit(main())
