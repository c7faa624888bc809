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
from search._fabric import fabric_dict
from service.api._resource_models import ClusterPresetList, ModelPresetList, error_responses
from service.api._state import Reader
from service.request import GPUIn, NodeIn, model_shape

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
    "mixtral-8x7b": "Jiang et al. 2024 (arXiv:2401.04088) Table 1; config.json of mistralai/Mixtral-8x7B-v0.1",
    "mixtral-8x22b": "config.json of mistral-community/Mixtral-8x22B-v0.1; mistral.ai/news/mixtral-8x22b",
    "deepseek-v3": "DeepSeek-AI 2024 (arXiv:2412.19437) Sec. 4.2; config.json of deepseek-ai/DeepSeek-V3",
    "qwen3-30b-a3b": "Qwen Team 2025 (arXiv:2505.09388) Table 2; config.json of Qwen/Qwen3-30B-A3B",
    "qwen3-235b-a22b": "Qwen Team 2025 (arXiv:2505.09388) Table 2; config.json of Qwen/Qwen3-235B-A22B",
    "kimi-k2": "Kimi Team 2025 (arXiv:2507.20534) Table 2; config.json of moonshotai/Kimi-K2-Base",
    "gpt-oss-120b": "OpenAI 2025, gpt-oss-120b & gpt-oss-20b Model Card, Table 1; config.json of openai/gpt-oss-120b; "
                    "Megatron-Bridge gpt_oss_provider.py (GPTOSSProvider120B)",
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
        items.append({"name": name, "shape": model_shape(spec).model_dump(mode="json"), "params": spec.params,
                      "active_params": spec.active_params,
                      "published_params": MODEL_PRESET_PARAMS.get(name), "source": MODEL_SOURCES.get(name)})
    return _render(ModelPresetList.model_validate({"data": items}).model_dump(mode="json"))


@cache
def clusters_json() -> Rendered:
    items = []
    for name in CLUSTER_PRESETS:
        spec = cluster_preset(name)
        gpu = GPUIn(**{f: getattr(spec.gpu, f) for f in GPUIn.model_fields})
        node = NodeIn(**{f: getattr(spec.node, f) for f in NodeIn.model_fields})
        items.append({"name": name, "gpu": gpu.model_dump(mode="json"), "node": node.model_dump(mode="json"),
                      "fabric": fabric_dict(spec.fabric)})
    return _render(ClusterPresetList.model_validate({"data": items}).model_dump(mode="json"))


_NOT_MODIFIED: dict[int | str, dict[str, Any]] = {
    304: {"description": "Not modified: If-None-Match holds the current ETag (no body)."}}


def _answer(request: Request, rendered: Rendered) -> Response:
    headers = {"ETag": rendered.etag, "Cache-Control": "public, max-age=3600"}
    if rendered.etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    return Response(rendered.body, media_type="application/json", headers=headers)


@router.get("/models", response_model=ModelPresetList, responses={**_NOT_MODIFIED, **error_responses(401, 403)},
            summary="Model presets: shape, parameter count (active per token for MoE) and source")
def list_model_presets(_: Reader, request: Request) -> Response:
    return _answer(request, models_json())


@router.get("/clusters", response_model=ClusterPresetList, responses={**_NOT_MODIFIED, **error_responses(401, 403)},
            summary="Cluster presets: the GPU and one node (times cluster.nodes in a request)")
def list_cluster_presets(_: Reader, request: Request) -> Response:
    return _answer(request, clusters_json())
