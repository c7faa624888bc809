"""Routes: predict one configuration (synchronous: a prediction takes milliseconds).

The prediction is :func:`service._evaluate.evaluate`'s, which a measured run is also stored beside
(``service.runs``), so a run's stored prediction is the one this endpoint gives for the same body.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter

from service._calibrations import choose, cluster_name
from service._evaluate import evaluate
from service.api._resource_models import PredictIn, PredictOut, error_responses
from service.api._state import Reader, State

router = APIRouter(prefix="/v1", tags=["predict"])


@router.post("/predict", response_model=PredictOut, responses=error_responses(401, 403, 422),
             summary="Predict one configuration's iteration time, throughput and memory",
             description="The same prediction as `autopar predict --json`, with the configuration resolved (dp "
                         "derived when omitted) and, when cluster.profile_id names an uploaded profile, the notes "
                         "of applying it and the reasons it may be stale. An invalid combination (a tp that does "
                         "not divide the heads, degrees that do not divide the GPUs, a batch that does not split) "
                         "is a 422 naming the field; a valid configuration that does not fit is a 200 with "
                         "feasible=false and the reasons. It stores nothing, so it needs only the read scope "
                         "(no token while reads are open). `calibration_id` picks the cost model's constants (default: "
                         "the cluster's or profile's latest calibration, else the published ones); `calibration` "
                         "says which were used and their cross-validated error.")
def predict_one(body: PredictIn, _: Reader, state: State) -> dict[str, Any]:
    chosen = choose(state.db, calibration_id=body.calibration_id, cluster=cluster_name(body.cluster.model_dump()),
                    profile_id=body.cluster.profile_id)
    ev = evaluate(body.model, body.cluster, body.training, body.framework, body.config, state.db, chosen.calibration,
                  chosen.gpu_rate_scale, body.host_safety_factor)
    return {"model": ev.model.name, "cluster": ev.cluster.name, "num_nodes": ev.cluster.num_nodes,
            "world_size": ev.cluster.world_size, "framework": ev.training.framework,
            "config": dataclasses.asdict(ev.config), "profile_id": body.cluster.profile_id,
            "prediction": ev.prediction.to_dict(), "profile_notes": list(ev.profile_notes),
            "profile_warnings": list(ev.profile_warnings), "calibration": chosen.out()}
