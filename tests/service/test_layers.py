"""The service reads in layers (issue 17): SQL lives in ``service/store/`` only, and the worker and
the command line do not reach inside the API. (``migrations/``, the Alembic scripts, define the
schema with SQLAlchemy and are not a layer of the service.)

Imports are read from the source with ``ast`` (nothing is imported), so a module that imports
SQLAlchemy inside a function is caught as well as one that imports it at the top.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("service", "search", "profiler", "autopar")
STORE = ROOT / "service" / "store"
ENGINE_ONLY = {"search/_storage.py": {"sqlalchemy", "sqlalchemy.engine", "sqlalchemy.exc", "sqlalchemy.pool"}}
"""Modules that may use SQLAlchemy's engine, not its query API: Optuna's storage URL checks open a
connection and run ``SELECT 1`` (``create_engine`` and ``text`` come from the top-level package)."""
QUERY_API = {"select", "insert", "update", "delete", "func", "and_", "or_", "Session", "sessionmaker"}


def _modules() -> Iterator[Path]:
    for package in PACKAGES:
        folder = ROOT / package
        if folder.is_dir():
            yield from sorted(folder.rglob("*.py"))


def _imports(path: Path) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """(line, module, names) of every import in ``path``; ``names`` is empty for ``import x``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module, tuple(alias.name for alias in node.names)


def _is_sqlalchemy(module: str) -> bool:
    return module == "sqlalchemy" or module.startswith("sqlalchemy.")


def test_no_module_outside_the_store_imports_sqlalchemy() -> None:
    found = []
    for path in _modules():
        if STORE in path.parents:
            continue
        rel = path.relative_to(ROOT).as_posix()
        allowed = ENGINE_ONLY.get(rel, set())
        for line, module, names in _imports(path):
            if not _is_sqlalchemy(module):
                continue
            if module in allowed and not QUERY_API & set(names):
                continue
            found.append(f"{rel}:{line}: {module} {', '.join(names)}".rstrip())
    assert not found, "SQL lives in service/store/ only; move these queries there:\n" + "\n".join(found)


def _outside_the_api() -> list[str]:
    return [path.relative_to(ROOT).as_posix() for path in sorted((ROOT / "service").glob("_*.py"))]


@pytest.mark.parametrize("rel", _outside_the_api())
def test_the_worker_and_the_cli_do_not_import_from_inside_the_api(rel: str) -> None:
    """``service.api`` itself (its public surface: ``autopar serve`` runs the app) is fine; its
    private modules are not."""
    inside = [f"{rel}:{line}: {module}" for line, module, _ in _imports(ROOT / rel)
              if module.startswith("service.api.")]
    assert not inside, "import what the API and they share from a neutral module (service.request, ...):\n" + (
        "\n".join(inside))


@pytest.mark.parametrize("package", ["service/request", "service/runs", "service/store"])
def test_the_shared_layers_do_not_import_the_api(package: str) -> None:
    inside = [f"{path.relative_to(ROOT)}:{line}: {module}" for path in sorted((ROOT / package).rglob("*.py"))
              for line, module, _ in _imports(path) if module.startswith("service.api")]
    assert not inside, "\n".join(inside)


def test_the_check_finds_a_query_outside_the_store(tmp_path: Path) -> None:
    """The parser sees imports at any depth, as ``from`` and plain imports."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from sqlalchemy import select\n    import sqlalchemy.orm\n")
    assert [(line, module) for line, module, _ in _imports(bad)] == [(2, "sqlalchemy"), (3, "sqlalchemy.orm")]
