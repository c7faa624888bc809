"""The REST service (FastAPI): ``create_app`` builds it, ``autopar serve`` runs it under uvicorn."""

from service.api._app import autopar_version, create_app
from service.api._settings import Settings

__all__ = ["Settings", "autopar_version", "create_app"]
