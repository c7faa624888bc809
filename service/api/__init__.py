"""The REST service (FastAPI): ``create_app`` builds it, ``autopar serve`` runs it under uvicorn."""

from service._settings import Settings
from service.api._app import autopar_version, create_app

__all__ = ["Settings", "autopar_version", "create_app"]
