"""The REST service (FastAPI): ``create_app`` builds it, ``autopar serve`` runs it under uvicorn."""

from service._settings import Settings
from service._version import autopar_version
from service.api._app import create_app

__all__ = ["Settings", "autopar_version", "create_app"]
