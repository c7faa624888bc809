"""Build step that pyproject.toml cannot say: ship the Alembic scripts as package data.

The repository keeps its migrations in the top-level ``migrations/`` folder (not an importable
package). A wheel carries them as data inside the service package, ``service/store/_alembic/``
(``env.py``, ``script.py.mako`` and every file of ``versions/``), where ``service.store`` looks first;
a source checkout or an editable install finds ``migrations/`` itself. Everything else is in
pyproject.toml.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SOURCE = "migrations"
TARGET = ("service", "store", "_alembic")  # service.store._db.MIGRATIONS_PACKAGED


class BuildPyWithMigrations(build_py):
    """build_py, then the Alembic scripts copied into the built service package."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib, *TARGET)
        for source in sorted((ROOT / SOURCE).rglob("*")):
            if source.is_dir() or "__pycache__" in source.parts or source.suffix == ".pyc":
                continue
            dest = target / source.relative_to(ROOT / SOURCE)
            self.mkpath(str(dest.parent))
            self.copy_file(str(source), str(dest))


setup(cmdclass={"build_py": BuildPyWithMigrations})
