"""Regenerate ``service/launch/megatron_flags.txt``: every long option of Megatron-LM's
``megatron/training/arguments.py`` at a pinned megatron-core release.

The megatron-core wheel (Python >= 3.12 only) is downloaded with ``pip download --no-deps``
and read as a zip; nothing is imported or installed. Two sources of flags are collected:

1. every string literal starting with ``--`` passed positionally to an ``.add_argument(...)``
   call in ``arguments.py``;
2. the flags ``ArgumentGroupFactory(SomeConfig, exclude=[...])`` generates from a dataclass
   (``megatron/training/argument_utils.py``): ``"--" + name.replace("_", "-")`` per init field
   of the class and its bases, minus ``exclude``; a ``bool`` field whose default is not False
   becomes ``--no-NAME`` and ``--disable-NAME``; ``metadata={"argparse_meta": {"arg_names": [...]}}``
   overrides the names. Most core flags (``--tensor-model-parallel-size``, ``--bf16``, ...) come
   from here.

Usage: ``python scripts/extract_megatron_flags.py [VERSION]`` (default 0.19.2).

Megatron-DeepSpeed (deepspeedai/Megatron-DeepSpeed, not on PyPI) is read from a source tree:
``python scripts/extract_megatron_flags.py --megatron-deepspeed DIR --commit SHA`` writes
``service/launch/megatron_deepspeed_flags.txt`` from ``DIR/megatron/arguments.py`` (plain
``add_argument`` calls) plus the options ``deepspeed.add_config_arguments`` adds to its parser
(``--deepspeed``, ``--deepspeed_config``, ...), read from the installed deepspeed by calling it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VERSION = "0.19.2"
ARGS_PATH = "megatron/training/arguments.py"
OUT = Path(__file__).resolve().parent.parent / "service" / "launch" / "megatron_flags.txt"
MDS_ARGS_PATH = "megatron/arguments.py"
MDS_OUT = OUT.with_name("megatron_deepspeed_flags.txt")


def download(version: str, dest: str) -> Path:
    base = [sys.executable, "-m", "pip", "download", f"megatron-core=={version}", "--no-deps", "-d", dest,
            "--python-version", "3.12", "--only-binary=:all:"]
    try:
        subprocess.run(base, check=True)
    except subprocess.CalledProcessError:
        subprocess.run([*base, "--platform", "manylinux2014_x86_64"], check=True)
    wheels = sorted(Path(dest).glob("megatron_core-*.whl"))
    if not wheels:
        raise SystemExit("pip download produced no megatron_core wheel")
    return wheels[0]


def _literal_flags(tree: ast.AST) -> set[str]:
    """``--flag`` literals of ``.add_argument(...)`` calls; ``argparse.BooleanOptionalAction``
    also defines ``--no-flag``."""
    flags: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            optional = any(kw.arg == "action" and ast.unparse(kw.value).endswith("BooleanOptionalAction")
                           for kw in node.keywords)
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                    flags.add(arg.value)
                    if optional:
                        flags.add("--no-" + arg.value[2:])
    return flags


def _classes(zf: zipfile.ZipFile) -> dict[str, ast.ClassDef]:
    """Every top-level class of the wheel's ``megatron`` package, by name (first wins)."""
    out: dict[str, ast.ClassDef] = {}
    for name in sorted(zf.namelist()):
        if not (name.startswith("megatron/") and name.endswith(".py")):
            continue
        try:
            tree = ast.parse(zf.read(name).decode("utf-8"))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, node)
    return out


def _is_bool(annotation: ast.expr) -> bool:
    text = ast.unparse(annotation).replace(" ", "")
    return text in ("bool", "Optional[bool]", "bool|None", "None|bool", "typing.Optional[bool]")


def _field_flags(item: ast.AnnAssign) -> list[str] | None:
    """The flags one dataclass field generates, or None for a non-init / ClassVar field."""
    if not isinstance(item.target, ast.Name):  # e.g. `self.x: int = ...`: not a dataclass field
        return None
    name = item.target.id
    if "ClassVar" in ast.unparse(item.annotation):
        return None
    default: object = None
    has_default = False
    meta_names: list[str] | None = None
    value = item.value
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field"):
        for kw in value.keywords:
            if kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False:
                return None
            if kw.arg == "default":
                has_default = True
                default = kw.value.value if isinstance(kw.value, ast.Constant) else object()
            if kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                for k, v in zip(kw.value.keys, kw.value.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value == "argparse_meta" and isinstance(v, ast.Dict):
                        for mk, mv in zip(v.keys, v.values, strict=True):
                            if isinstance(mk, ast.Constant) and mk.value == "arg_names":
                                meta_names = [str(x) for x in ast.literal_eval(mv)]
    elif value is not None:
        has_default = True
        default = value.value if isinstance(value, ast.Constant) else object()
    if meta_names is not None:
        return meta_names
    dashed = name.replace("_", "-")
    if _is_bool(item.annotation) and not (has_default and default is False):
        return [f"--no-{dashed}", f"--disable-{dashed}"]
    return [f"--{dashed}"]


def _dataclass_flags(cls_name: str, exclude: set[str], classes: dict[str, ast.ClassDef]) -> set[str]:
    flags: set[str] = set()
    seen: set[str] = set()
    todo = [cls_name]
    while todo:
        name = todo.pop()
        if name in seen or name not in classes:
            continue
        seen.add(name)
        node = classes[name]
        todo.extend(ast.unparse(b).split(".")[-1] for b in node.bases)
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                if item.target.id in exclude:
                    continue
                names = _field_flags(item)
                if names:
                    flags.update(names)
    return flags


def _factory_flags(tree: ast.Module, classes: dict[str, ast.ClassDef]) -> set[str]:
    flags: set[str] = set()
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        assigns: dict[str, ast.expr] = {}
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                assigns[node.targets[0].id] = node.value
        for node in ast.walk(func):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "ArgumentGroupFactory" and node.args):
                continue
            exclude: set[str] = set()
            for kw in node.keywords:
                if kw.arg == "exclude":
                    expr = assigns[kw.value.id] if isinstance(kw.value, ast.Name) else kw.value
                    exclude = set(ast.literal_eval(expr))
            cls = ast.unparse(node.args[0]).split(".")[-1]
            if cls not in classes:
                raise SystemExit(f"class {cls} used by ArgumentGroupFactory not found in the wheel")
            flags |= _dataclass_flags(cls, exclude, classes)
    return flags


def extract(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        tree = ast.parse(zf.read(ARGS_PATH).decode("utf-8"))
        return sorted(_literal_flags(tree) | _factory_flags(tree, _classes(zf)))


def deepspeed_config_flags() -> tuple[str, set[str]]:
    """(deepspeed version, the long options ``deepspeed.add_config_arguments`` defines)."""
    import argparse

    import deepspeed

    parser = deepspeed.add_config_arguments(argparse.ArgumentParser())
    return deepspeed.__version__, {s for s in parser._option_string_actions if s.startswith("--") and s != "--help"}


def extract_megatron_deepspeed(source: Path) -> list[str]:
    tree = ast.parse((source / MDS_ARGS_PATH).read_text(encoding="utf-8"))
    return sorted(_literal_flags(tree) | deepspeed_config_flags()[1])


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("version", nargs="?", default=VERSION, help=f"megatron-core release (default {VERSION})")
    p.add_argument("--megatron-deepspeed", type=Path, metavar="DIR",
                   help="a Megatron-DeepSpeed source tree: write megatron_deepspeed_flags.txt instead")
    p.add_argument("--commit", help="the commit DIR is at (recorded in the file's first line)")
    args = p.parse_args()
    if args.megatron_deepspeed is not None:
        if not args.commit:
            raise SystemExit("--commit is required with --megatron-deepspeed: the flag list names its source commit")
        flags = extract_megatron_deepspeed(args.megatron_deepspeed)
        ds_version = deepspeed_config_flags()[0]
        MDS_OUT.write_text(f"# Megatron-DeepSpeed {args.commit} {MDS_ARGS_PATH} + deepspeed {ds_version} "
                           "add_config_arguments\n" + "".join(f"{f}\n" for f in flags))
        print(f"wrote {len(flags)} flags to {MDS_OUT}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        flags = extract(download(args.version, tmp))
    OUT.write_text(f"# megatron-core {args.version} {ARGS_PATH}\n" + "".join(f"{f}\n" for f in flags))
    print(f"wrote {len(flags)} flags to {OUT}")


if __name__ == "__main__":
    main()
