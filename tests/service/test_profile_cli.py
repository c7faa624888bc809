"""``autopar profile``: sections, the written profile, upload, errors and Ctrl-C (CPU, for real)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

import profiler._run as run_module
from search import HardwareProfile, SpecError, apply_profile, cluster_preset
from service._profile_cli import upload, upload_url
from service.cli import main


def test_nvme_and_cpu_adam_sections_write_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "profile.json"
    disk = tmp_path / "disk"
    disk.mkdir()
    code = main(["profile", "--quick", "--only", "nvme,cpu-adam", "--nvme-path", str(disk), "--out", str(out)])
    assert code == 0
    profile = HardwareProfile.load(out)
    assert profile.nvme_read_bytes_per_s and profile.nvme_read_bytes_per_s > 0
    assert profile.nvme_write_bytes_per_s and profile.nvme_write_bytes_per_s > 0
    assert profile.cpu_adam_params_per_s and profile.cpu_adam_params_per_s > 0
    assert set(profile.aio) >= {"block_size", "queue_depth", "intra_op_parallelism"}
    assert profile.gemm == () and profile.links == ()
    measured, warnings = apply_profile(cluster_preset("dgx-h100"), profile)
    assert measured.node.nvme_read_bytes_per_s == profile.nvme_read_bytes_per_s
    assert any("GEMM" in w for w in warnings)
    assert "NVMe read" in capsys.readouterr().out
    assert not list(disk.iterdir()), "the NVMe test file is removed"


def test_profile_feeds_autopar_predict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "profile.json"
    assert main(["profile", "--quick", "--only", "matmul", "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["gemm"] and printed == json.loads(out.read_text())
    code = main(["predict", "--model", "gpt-1.7b", "--cluster", "dgx-a100-80gb", "--global-batch", "64",
                 "--profile", str(out), "--json"])
    assert code == 0
    prediction = json.loads(capsys.readouterr().out)
    assert any("stale profile" in w for w in prediction["warnings"]), "a CPU profile does not match an A100 node"


def test_host_links_without_cuda_are_skipped_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--only", "host", "--out", str(tmp_path / "p.json")]) == 0
    assert "host skipped" in capsys.readouterr().err
    assert HardwareProfile.load(tmp_path / "p.json").host_to_device_bytes_per_s is None


def test_unknown_section_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--only", "matmul,gpu-burn", "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "--only" in err and "gpu-burn" in err and "cpu-adam" in err
    assert not (tmp_path / "p.json").exists()


def test_ctrl_c_keeps_what_was_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(*_args: Any, **_kwargs: Any) -> Any:
        raise KeyboardInterrupt

    import profiler._cpu_adam

    monkeypatch.setattr(profiler._cpu_adam, "measure_cpu_adam", interrupted)
    out = tmp_path / "p.json"
    disk = tmp_path / "disk"
    disk.mkdir()
    code = main(["profile", "--quick", "--only", "nvme,cpu-adam", "--nvme-path", str(disk), "--out", str(out)])
    assert code == 130
    profile = HardwareProfile.load(out)
    assert profile.nvme_read_bytes_per_s and profile.cpu_adam_params_per_s is None
    assert "interrupted" in capsys.readouterr().err
    assert run_module.SECTIONS[-1] == "cpu-adam"


class _Receiver(BaseHTTPRequestHandler):
    received: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        _Receiver.received.append(self.rfile.read(length))
        self.send_response(201)
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


def test_upload_posts_the_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        out = tmp_path / "p.json"
        url = f"http://127.0.0.1:{server.server_port}/profiles"
        assert main(["profile", "--only", "host", "--out", str(out), "--upload", url]) == 0
    finally:
        server.shutdown()
        server.server_close()
    assert json.loads(_Receiver.received[-1]) == json.loads(out.read_text())
    assert "HTTP 201" in capsys.readouterr().err


def test_unreachable_upload_is_a_clear_error_and_keeps_the_file(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.json"
    assert main(["profile", "--only", "host", "--out", str(out), "--upload", "http://127.0.0.1:9/x"]) == 2
    assert "--upload" in capsys.readouterr().err
    assert HardwareProfile.load(out).fingerprint.gpu_name


def test_upload_to_the_real_service_with_a_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bytes ``autopar profile --upload`` sends are stored by the service; a base URL gets
    /v1/profiles; without AUTOPAR_TOKEN the service's 401 comes back with what to do."""
    import uvicorn

    from service.api import Settings, create_app
    from service.api._auth import create_token
    from service.store import Database

    db = Database(f"sqlite:///{tmp_path / 'a.db'}")
    app = create_app(Settings(database_url=db.url, workers=0), db=db)
    token = create_token(db, "uploader", ["write"])[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        out = tmp_path / "p.json"
        monkeypatch.delenv("AUTOPAR_TOKEN", raising=False)
        with pytest.raises(SpecError, match="AUTOPAR_TOKEN") as err:
            upload(f"http://127.0.0.1:{port}", '{"schema_version": 1}')
        assert "HTTP 401" in err.value.problem
        monkeypatch.setenv("AUTOPAR_TOKEN", token)
        assert main(["profile", "--only", "host", "--out", str(out), "--upload", f"http://127.0.0.1:{port}"]) == 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/profiles") as resp:
            page = json.loads(resp.read())
        assert page["count"] == 1
        stored = page["data"][0]["id"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/profiles/{stored}") as resp:
            body = json.loads(resp.read())
        assert HardwareProfile.from_dict(body["body"]) == HardwareProfile.load(out)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        db.dispose()


def test_upload_url_appends_the_profiles_path() -> None:
    assert upload_url("http://h:8000") == "http://h:8000/v1/profiles"
    assert upload_url("http://h:8000/") == "http://h:8000/v1/profiles"
    assert upload_url("http://h/custom/profiles") == "http://h/custom/profiles"
