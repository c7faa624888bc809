"""The frameworks' own validators on emitted files, where the frameworks are installed.

Emission never needs them (see :mod:`service.launch._targets`); ``autopar search --emit ...
--check`` runs them on top: DeepSpeed's ``DeepSpeedZeroConfig`` and ``DeepSpeedConfig`` on a
``ds_config.json`` (:func:`service.launch.check_ds_config`), torchtitan's ``ConfigManager`` and
``ParallelDims`` on ``autopar_torchtitan.py`` (with stand-ins for the recipe values left to the
environment). A framework that is not installed is a note, never a failure; a validator that
refuses the files is a :class:`search.SpecError`. Megatron's own ``parse_args`` needs Python 3.12
and a GPU stub (``scripts/check_framework_parsers.py``); autopar's checks of its flag lists and
``validate_args`` rules always run at emission.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

from search import SpecError

from ._base import LaunchFiles, LaunchRequest
from ._deepspeed import check_ds_config
from ._recipe import REQUIRED  # noqa: F401  (named in a docstring)
from ._torchtitan import CONFIG_FUNCTION, CONFIG_MODULE

_STAND_INS = {"DATA_PATH": "/stand-in/data", "DATASET": "c4_test", "TOKENIZER": "/stand-in/tokenizer",
              "LR": "0.0003", "TRAIN_ITERS": "1000"}
"""Values for the recipe placeholders (:data:`REQUIRED`) while torchtitan builds the config (never written)."""


def _installed(module: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the frameworks' own import-time notices
            importlib.import_module(module)
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update({name: value for name, value in values.items() if not os.environ.get(name)})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _check_torchtitan(text: str, request: LaunchRequest) -> None:
    from torchtitan.config import ConfigManager  # type: ignore[import-untyped]
    from torchtitan.distributed import ParallelDims  # type: ignore[import-untyped]

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / f"{CONFIG_MODULE}.py").write_text(text)
        sys.path.insert(0, folder)
        sys.modules.pop(CONFIG_MODULE, None)
        stderr = io.StringIO()
        try:
            with _environment(_STAND_INS), warnings.catch_warnings(), contextlib.redirect_stderr(stderr):
                warnings.simplefilter("ignore")
                config = ConfigManager().parse_args(["--module", CONFIG_MODULE, "--config", CONFIG_FUNCTION])
                ParallelDims.from_config(config.parallelism, request.cluster.world_size)
        except (Exception, SystemExit) as exc:  # tyro exits on a config it refuses; torchtitan asserts
            message = " ".join(f"{exc} {stderr.getvalue()}".split())[:500] or type(exc).__name__
            raise SpecError(f"{CONFIG_MODULE}.py", f"torchtitan refuses it: {message}",
                            "report it: autopar should not emit what torchtitan refuses") from None
        finally:
            sys.path.remove(folder)
            sys.modules.pop(CONFIG_MODULE, None)


def verify(request: LaunchRequest, files: LaunchFiles) -> tuple[str, ...]:
    """Run the installed frameworks' validators on ``files``; notes say what ran and what could not."""
    notes: list[str] = []
    if "ds_config.json" in files.files:
        if _installed("deepspeed"):
            check_ds_config(json.loads(files.files["ds_config.json"]), request.config.dp)
            notes.append(f"checked: DeepSpeed's DeepSpeedZeroConfig and DeepSpeedConfig accept ds_config.json at "
                         f"data-parallel size {request.config.dp}")
        else:
            notes.append("not checked by DeepSpeed, which is not installed here (pip install deepspeed): "
                         "ds_config.json passed autopar's own rules only")
    module = f"{CONFIG_MODULE}.py"
    if module in files.files:
        if _installed("torchtitan.config"):
            _check_torchtitan(files.files[module], request)
            notes.append(f"checked: torchtitan's ConfigManager builds {module}'s config and ParallelDims accepts "
                         f"its layout on {request.cluster.world_size} GPUs")
        else:
            notes.append(f"not checked by torchtitan, which is not installed here (pip install torchtitan): "
                         f"{module} passed autopar's own rules only")
    if any(name.endswith("_args.txt") for name in files.files):
        notes.append("Megatron's own parse_args was not run (it needs Python 3.12 and a Megatron install: "
                      "scripts/check_framework_parsers.py); the arguments passed the pinned flag list and "
                      "autopar's copy of validate_args' rules")
    return tuple(notes)
