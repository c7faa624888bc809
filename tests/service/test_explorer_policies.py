"""The explorer shows the fine-grained memory policies (issue 18): its formatting functions, run under
Node (the browser tests need Chromium)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.service.test_explorer_whatif import node_eval

FORMAT = Path(__file__).resolve().parents[2] / "service" / "api" / "static" / "explorer" / "format.js"
BASE = {"dp": 1, "tp": 8, "pp": 2, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "sp": True, "tp_comm_overlap": False,
        "micro_batch": 1, "zero_stage": 1, "offload_optimizer": "none", "offload_param": "none", "recompute": "none",
        "stage_layers": None}


def _format(config: dict[str, object]) -> dict[str, str]:
    cfg = {**BASE, **config}
    script = f"""
import {{ layout, offload, recompute }} from '{FORMAT.as_uri()}';
const c = {{ framework: 'megatron', config: {json.dumps(cfg)} }};
console.log(JSON.stringify({{ layout: layout(c), offload: offload(c.config), recompute: recompute(c.config) }}));
"""
    out = node_eval(script)
    assert isinstance(out, dict)
    return out


def test_partial_offload_and_block_recompute_read_in_the_layout() -> None:
    out = _format({"offload_optimizer": "cpu", "optimizer_offload_fraction": 0.35, "recompute": "full",
                   "recompute_layers": 17})
    assert out["offload"] == "opt:cpu 35%"
    assert out["recompute"] == "full recompute (17 layers/stage)"
    assert "offload opt:cpu 35%" in out["layout"] and "(17 layers/stage)" in out["layout"]


def test_activation_offload_and_tiles_read_in_the_layout() -> None:
    out = _format({"pp": 1, "activation_offload_layers": 40, "tiles": 16})
    assert out["offload"] == "act:40 layers"
    assert "activations of 40 layers on CPU" in out["layout"] and "16 tiles" in out["layout"]


def test_the_all_or_nothing_policies_read_as_before() -> None:
    out = _format({"offload_optimizer": "cpu", "recompute": "full"})
    assert out["offload"] == "opt:cpu" and out["recompute"] == "full recompute"
    assert "tiles" not in out["layout"] and "activations" not in out["layout"]
