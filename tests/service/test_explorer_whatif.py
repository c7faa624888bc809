"""The explorer's what-if panel, its pure parts run under Node (the browser tests need Chromium): the
request it posts asks the same question on another preset with as many GPUs, with the spine's
oversubscription when one is given, and the fabric reads as the CLI prints it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from search import cluster_preset
from service.cli import presets_dict

WHATIF = Path(__file__).resolve().parents[2] / "service" / "api" / "static" / "explorer" / "whatif.js"


def node_eval(script: str) -> object:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    done = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_request_asks_the_same_question_on_the_other_cluster() -> None:
    clusters = [{"name": name, **{k: v for k, v in c.items() if k in ("node", "fabric")}}
                for name, c in presets_dict()["clusters"].items()]
    request = {"model": {"preset": "gpt3-175b"}, "cluster": {"preset": "dgx-b200", "nodes": 9, "profile_id": "p1"},
               "training": {"global_batch": 576}, "framework": "megatron", "top": 5}
    script = f"""
import {{ versusRequest, describeFabric }} from '{WHATIF.as_uri()}';
const clusters = {json.dumps(clusters)};
const byName = Object.fromEntries(clusters.map((c) => [c.name, c]));
const out = {{
  rack: versusRequest({json.dumps(request)}, 72, byName['gb200-nvl72'], 1),
  blocking: versusRequest({json.dumps(request)}, 72, byName['dgx-b200'], 2),
  fabrics: Object.fromEntries(clusters.map((c) => [c.name, describeFabric(c.fabric)])),
}};
for (const [gpus, name, ratio] of [[12, 'dgx-b200', 1], [16, 'dgx-2', 2]]) {{
  try {{ versusRequest({json.dumps(request)}, gpus, byName[name], ratio); out[name] = 'accepted'; }}
  catch (err) {{ out[name] = err.message; }}
}}
console.log(JSON.stringify(out));
"""
    out = node_eval(script)
    assert isinstance(out, dict)
    assert out["rack"] == {**request, "cluster": {"preset": "gb200-nvl72", "nodes": 18}}
    blocking = out["blocking"]["cluster"]
    assert blocking["preset"] == "dgx-b200" and blocking["nodes"] == 9
    assert [t["oversubscription"] for t in blocking["fabric"]["tiers"]] == [1.0, 2, 1.0]
    assert "do not make 12 GPUs" in out["dgx-b200"] and "one tier" in out["dgx-2"]
    for name, text in out["fabrics"].items():
        assert text == cluster_preset(name).fabric.describe(), name
