"""The running autopar's version, as stored with searches, runs and calibrations."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def autopar_version() -> str:
    try:
        return version("autopar")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "0+unknown"
