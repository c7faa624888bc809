"""The distribution: a wheel built from this tree claims only autopar's own top-level names (no
``migrations`` package), carries every Alembic script as data, and `autopar db upgrade` migrates
from a virtual environment that installed it; ``import autopar`` is a facade that loads neither
torch nor the service nor the profiler.

The wheel is built once per session without build isolation (about 2 s; setuptools is in every
Python 3.11 venv) and installed without dependencies into a venv that borrows this one's
site-packages as a plain path (its .pth files, this tree's editable install among them, stay off).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


SOURCES = ("pyproject.toml", "setup.py", "README.md", "autopar", "search", "profiler", "service", "migrations")
"""What the Dockerfile copies to build its wheel."""


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the sources (an in-tree build would reuse a stale build/ folder)."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=skip)
        else:
            shutil.copy(REPO / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out)], check=True, cwd=out, capture_output=True, timeout=300)
    (built,) = out.glob("autopar-*.whl")
    return built


def test_the_wheel_claims_only_its_own_names_and_carries_every_migration(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"autopar", "search", "profiler", "service"}, top
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["autopar", "profiler", "search", "service"]
    shipped = {n.removeprefix("service/store/_alembic/") for n in names if n.startswith("service/store/_alembic/")}
    in_tree = {p.relative_to(REPO / "migrations").as_posix() for p in (REPO / "migrations").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert shipped == in_tree and {"env.py", "script.py.mako"} <= shipped  # every version, however many
    assert any(n.startswith("versions/0001") for n in shipped)


def test_db_upgrade_from_a_venv_that_installed_the_wheel(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "borrowed.pth").write_text(sysconfig.get_path("purelib") + "\n")  # the dependencies, as a path only
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, capture_output=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOPAR_", "PYTHON"))}
    env["AUTOPAR_DATA_DIR"] = str(tmp_path / "data")
    where = subprocess.run([str(python), "-c", "import service.store._db as d, importlib.util as u; "
                            "print(d.migrations_dir()); print(u.find_spec('migrations'))"],
                           check=True, capture_output=True, text=True, cwd=tmp_path, env=env).stdout.split("\n")
    assert where[0] == str(site / "service" / "store" / "_alembic") and where[1] == "None"
    autopar = str(env_dir / "bin" / "autopar")
    upgrade = subprocess.run([autopar, "db", "upgrade"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert upgrade.returncode == 0, upgrade.stderr
    current = subprocess.run([autopar, "db", "current"], capture_output=True, text=True, cwd=tmp_path, env=env)
    head = sorted(p.name[:4] for p in (REPO / "migrations" / "versions").glob("[0-9]*.py"))[-1]
    assert current.returncode == 0 and head in current.stdout, current.stdout + current.stderr


def test_the_readmes_python_example_runs() -> None:
    (example,) = re.findall(r"## From Python\n.*?```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    out = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert re.match(r"\d+\.\d{3} s per step, \d+\.\d GiB per GPU\nParallelConfig\(", out.stdout), out.stdout


def test_the_facade_predicts_and_searches_without_torch_or_the_service() -> None:
    code = ("import sys, autopar\n"
            "loaded = {m.split('.')[0] for m in sys.modules}\n"
            "heavy = loaded & {'torch', 'service', 'profiler', 'fastapi', 'sqlalchemy'}\n"
            "assert not heavy, heavy\n"
            "model, cluster = autopar.model_preset('llama2-7b'), autopar.cluster_preset('dgx-a100-80gb')\n"
            "training = autopar.TrainingSpec(global_batch=64)\n"
            "p = autopar.predict(model, cluster, autopar.ParallelConfig(dp=8, micro_batch=1), training)\n"
            "best = autopar.search(model, cluster, 64, top_k=1)\n"
            "assert best.top[0].prediction.tokens_per_s >= p.tokens_per_s > 0\n"
            "print(autopar.__version__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    from importlib.metadata import version

    assert out.stdout.strip() == version("autopar")
