"""Every launch target is written where neither DeepSpeed, torch nor torchtitan can be imported (a plain
``pip install -e .``, the Docker image): ``autopar search --emit`` for each framework of the README's
search examples, and the API's launch endpoint, answer with files, never with a missing module.

The absence is simulated in a fresh interpreter with an import blocker on ``sys.meta_path``; the test
also holds that the emitted files carry no path of the machine that wrote them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).parents[2]

# (model, framework, targets): the frameworks of the README's search examples; torchtitan runs llama3 flavors.
CASES = [
    ("gpt-1.7b", "megatron", ["megatron", "torchrun", "deepspeed-launcher", "slurm"]),
    ("gpt-1.7b", "deepspeed", ["deepspeed", "torchrun", "deepspeed-launcher", "slurm"]),
    ("gpt-1.7b", "megatron-deepspeed", ["megatron-deepspeed", "deepspeed", "torchrun", "deepspeed-launcher",
                                        "slurm"]),
    ("llama3-8b", "fsdp", ["torchtitan", "torchrun", "slurm"]),
]

SCRIPT = textwrap.dedent('''
    import importlib.abc, json, os, sys
    from pathlib import Path

    BLOCKED = ("deepspeed", "torch", "torchtitan", "triton")

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    cases, work = json.loads(sys.argv[1]), Path(sys.argv[2])
    from service.cli import main

    report = {"cli": {}, "api": {}}
    for model, framework, targets in cases:
        out = work / framework
        code = main(["search", "--model", model, "--cluster", "dgx-h100", "--global-batch", "64", "--top", "3",
                     "--framework", framework, "--emit", ",".join(targets), "--out", str(out), "--check"])
        report["cli"][framework] = [code, sorted(p.name for p in out.iterdir())]

    from fastapi.testclient import TestClient
    from service._worker import run_worker
    from service.api import Settings, create_app
    from service.api._auth import create_token
    from service.store import Database

    settings = Settings(database_url=f"sqlite:///{work / 'autopar.db'}", workers=0, lease_s=2.0, poll_s=0.05)
    db = Database(settings.database_url)
    db.upgrade()
    auth = {"Authorization": "Bearer " + create_token(db, "t", ["write"])[1]}
    with TestClient(create_app(settings, db=db, migrate=False)) as client:
        locations = {}
        for model, framework, targets in cases:
            r = client.post("/v1/searches", headers=auth, json={
                "model": {"preset": model}, "cluster": {"preset": "dgx-h100", "nodes": 1},
                "training": {"global_batch": 64}, "framework": framework, "top": 2})
            locations[framework] = r.headers["location"]
        while run_worker(settings, once=True):
            pass
        for model, framework, targets in cases:
            for target in targets:
                r = client.get(f"{locations[framework]}/configs/1/launch", params={"target": target})
                body, files = r.json(), r.json().get("files", {})
                text = "\\n".join(files.values()) + body.get("command", "") + json.dumps(body.get("env", {}))
                report["api"][f"{framework}/{target}"] = [r.status_code, sorted(files), text]
    db.dispose()
    report["imported"] = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print(json.dumps(report))
''')


def test_every_target_without_deepspeed_torch_or_torchtitan(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(CASES), str(work)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["imported"] == []
    expected_files = {
        "megatron": ["hostfile", "job.sbatch", "launch_deepspeed.sh", "launch_torchrun.sh", "megatron_args.txt"],
        "deepspeed": ["ds_config.json", "hostfile", "job.sbatch", "launch_deepspeed.sh", "launch_torchrun.sh"],
        "megatron-deepspeed": ["ds_config.json", "hostfile", "job.sbatch", "launch_deepspeed.sh",
                               "launch_torchrun.sh", "megatron_deepspeed_args.txt"],
        "fsdp": ["autopar_torchtitan.py", "job.sbatch", "launch_torchrun.sh"],
    }
    for framework, (code, files) in report["cli"].items():
        assert code == 0, (framework, done.stderr[-2000:])
        assert set(expected_files[framework]) <= set(files), (framework, files)
    # --check says what it could not run, as a note, never as a failure
    assert "not checked by DeepSpeed, which is not installed here" in done.stderr
    assert "not checked by torchtitan, which is not installed here" in done.stderr
    assert "Traceback" not in done.stderr and "ModuleNotFoundError" not in done.stderr
    assert len(report["api"]) == sum(len(targets) for _, _, targets in CASES)
    for key, (status, files, text) in report["api"].items():
        assert status == 200, (key, text)
        assert files, key
        assert str(tmp_path) not in text and str(ROOT) not in text, key
    for path in work.rglob("*"):
        if path.is_file() and path.suffix != ".db":
            text = path.read_text()
            assert str(tmp_path) not in text and str(ROOT) not in text, path
