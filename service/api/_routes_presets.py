"""Routes: the model and cluster presets (what ``autopar presets --json`` prints).

They never change while the process runs, so each answer is rendered to bytes once, with an
ETag; a client that sends it back in ``If-None-Match`` gets 304 and no body.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from functools import cache
from typing import Any

from fastapi import APIRouter, Request, Response

from search import CLUSTER_PRESETS, MODEL_PRESET_PARAMS, MODEL_PRESETS, cluster_preset
from service.api._resource_models import ClusterPresetList, ModelPresetList, error_responses
from service.api._schemas import GPUIn, ModelShape, NodeIn
from service.api._state import Reader

router = APIRouter(prefix="/v1/presets", tags=["presets"])

_NARAYANAN = "Narayanan et al. 2021 (arXiv:2104.04473) Table 1"
_LLAMA2 = "Touvron et al. 2023 (arXiv:2307.09288) Table 1; Hugging Face config.json of meta-llama/Llama-2-{}-hf"
_LLAMA3 = "Llama Team 2024 (arXiv:2407.21783) Table 3; Hugging Face config.json of meta-llama/Meta-Llama-3-{}"
MODEL_SOURCES: dict[str, str] = {
    **{name: _NARAYANAN for name in ("gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "gpt-18b", "gpt-39b", "gpt-76b",
                                     "gpt-145b", "gpt-310b", "gpt-530b", "gpt-1t")},
    "gpt3-175b": "Brown et al. 2020 (arXiv:2005.14165) Table 2.1; vocabulary padded as in Narayanan et al. 2021",
    "llama2-7b": _LLAMA2.format("7b"), "llama2-13b": _LLAMA2.format("13b"), "llama2-70b": _LLAMA2.format("70b"),
    "llama3-8b": _LLAMA3.format("8B"), "llama3-70b": _LLAMA3.format("70B"),
    "llama3-405b": "Llama Team 2024 (arXiv:2407.21783) Table 3; Llama 3.1 model card",
    "bloom-176b": "bigscience/bloom model card; Le Scao et al. 2022 (arXiv:2211.05100)",
    "mpt-7b": "mosaicml/mpt-7b model card, Hyperparameter table",
    "mpt-30b": "mosaicml/mpt-30b model card, Hyperparameter table",
}
"""Where each preset shape comes from (the comments of search/_model_presets.py, one line each)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Rendered:
    body: bytes
    etag: str


def _render(data: dict[str, Any]) -> Rendered:
    body = json.dumps(data, separators=(",", ":")).encode()
    return Rendered(body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


@cache
def models_json() -> Rendered:
    items = []
    for name, spec in MODEL_PRESETS.items():
        shape = ModelShape(**{f: getattr(spec, f) for f in ModelShape.model_fields})
        items.append({"name": name, "shape": shape.model_dump(mode="json"), "params": spec.params,
                      "published_params": MODEL_PRESET_PARAMS.get(name), "source": MODEL_SOURCES.get(name)})
    return _render(ModelPresetList.model_validate({"data": items}).model_dump(mode="json"))


@cache
def clusters_json() -> Rendered:
    items = []
    for name in CLUSTER_PRESETS:
        spec = cluster_preset(name)
        gpu = GPUIn(**{f: getattr(spec.gpu, f) for f in GPUIn.model_fields})
        node = NodeIn(**{f: getattr(spec.node, f) for f in NodeIn.model_fields})
        items.append({"name": name, "gpu": gpu.model_dump(mode="json"), "node": node.model_dump(mode="json")})
    return _render(ClusterPresetList.model_validate({"data": items}).model_dump(mode="json"))


_NOT_MODIFIED: dict[int | str, dict[str, Any]] = {
    304: {"description": "Not modified: If-None-Match holds the current ETag (no body)."}}


def _answer(request: Request, rendered: Rendered) -> Response:
    headers = {"ETag": rendered.etag, "Cache-Control": "public, max-age=3600"}
    if rendered.etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    return Response(rendered.body, media_type="application/json", headers=headers)


@router.get("/models", response_model=ModelPresetList, responses={**_NOT_MODIFIED, **error_responses(401, 403)},
            summary="Model presets: shape, parameter count and source")
def list_model_presets(_: Reader, request: Request) -> Response:
    return _answer(request, models_json())


@router.get("/clusters", response_model=ClusterPresetList, responses={**_NOT_MODIFIED, **error_responses(401, 403)},
            summary="Cluster presets: the GPU and one node (times cluster.nodes in a request)")
def list_cluster_presets(_: Reader, request: Request) -> Response:
    return _answer(request, clusters_json())
