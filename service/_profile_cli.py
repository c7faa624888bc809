"""``autopar profile``: measure this cluster and write a hardware profile.

    autopar profile [--quick] [--only matmul,collectives,host,nvme,cpu-adam] [--out FILE]
                    [--nvme-path DIR] [--upload URL] [--json] [--collectives-from FILE.json]

Across nodes, run the collectives worker on every node (``torchrun --nnodes N ... -m
profiler.collectives_worker --out FILE [--hosts hosts.txt]``) and pass its JSON with
``--collectives-from``: the profile then holds the fits inside a node, across nodes of a leaf and
across leaves, and each node's leaf.

The benchmarks import torch (the ``profile`` extra); the search and the service read the
profile without it. Ctrl-C stops the run and keeps what was measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from search import SpecError
from service._spec_files import parse_choices

SECTIONS = ("matmul", "collectives", "host", "nvme", "cpu-adam")
EXIT_INTERRUPTED = 130


def add_profile_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``autopar profile``."""
    p = sub.add_parser("profile", help="measure this cluster and write a hardware profile",
                       description="Run microbenchmarks (matmul, collectives, host links, NVMe, CPU Adam) "
                                   "and write a hardware profile the cost model reads (--profile).")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats (under a minute on one node)")
    p.add_argument("--only", metavar="LIST", default=",".join(SECTIONS),
                   help=f"comma-separated sections to run (default: all of {','.join(SECTIONS)})")
    p.add_argument("--out", type=Path, default=Path("hardware-profile.json"), metavar="FILE",
                   help="where to write the profile (default: hardware-profile.json)")
    p.add_argument("--nvme-path", metavar="DIR", help="directory on the NVMe to benchmark (nvme section)")
    p.add_argument("--upload", metavar="URL",
                   help="also POST the profile to the service (http://HOST:PORT or its /v1/profiles URL), "
                        f"with the token in ${TOKEN_ENV}")
    p.add_argument("--collectives-from", metavar="FILE.json",
                   help="the JSON of a multi-node `torchrun ... -m profiler.collectives_worker --out FILE` (with "
                        "--hosts or AUTOPAR_LEAF for each node's leaf): its fits per tier (in a node, across nodes "
                        "of a leaf, across leaves) instead of this node's collectives")
    p.add_argument("--json", action="store_true", help="print the profile JSON instead of the summary table")
    p.set_defaults(handler=run)


def parse_sections(text: str) -> tuple[str, ...]:
    """``--only`` as a tuple of known sections, or a SpecError naming the unknown ones."""
    return parse_choices(text, SECTIONS, "--only", "a section")


TOKEN_ENV = "AUTOPAR_TOKEN"


def upload_url(url: str) -> str:
    """``url`` as given, or ``URL/v1/profiles`` when it names only the service (no path)."""
    parts = urllib.parse.urlsplit(url)
    if parts.path in ("", "/"):
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/v1/profiles", parts.query, ""))
    return url


def _server_error(exc: urllib.error.HTTPError, url: str) -> SpecError:
    """The service's own ``{"detail": [{"field", "msg", "fix"}]}`` answer as a SpecError."""
    try:
        item = json.loads(exc.read() or b"{}")["detail"][0]
        msg, fix = str(item["msg"]), str(item["fix"])
    except (ValueError, KeyError, IndexError, TypeError):
        msg, fix = f"HTTP {exc.code} {exc.reason}", "check the service URL and its logs"
    if exc.code == 401:
        fix = (f"set {TOKEN_ENV} to a token with the write scope (`autopar token create --scope write` "
               "on the service host)")
    return SpecError("--upload", f"{url} refused the profile (HTTP {exc.code}): {msg}",
                     f"{fix} (the profile is saved in --out either way)")


def upload(url: str, payload: str, timeout_s: float = 30.0, token: str | None = None) -> tuple[int, str | None]:
    """POST the profile JSON to ``url`` (a service base URL gets ``/v1/profiles``) with the
    ``AUTOPAR_TOKEN`` bearer token; returns (HTTP status, Location) or raises SpecError with the cause."""
    url = upload_url(url)
    token = token if token is not None else os.environ.get(TOKEN_ENV, "").strip()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=payload.encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status), response.headers.get("Location")
    except urllib.error.HTTPError as exc:
        raise _server_error(exc, url) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise SpecError("--upload", f"could not POST the profile to {url}: {exc}",
                        "check the service URL (the profile is saved in --out either way)") from None


def run(args: argparse.Namespace) -> int:
    """The ``autopar profile`` handler."""
    sections = parse_sections(args.only)
    try:
        from profiler import run_profile
    except ImportError as exc:  # torch missing: the profiler's benchmarks need it
        raise SpecError("autopar profile", f"the profiler cannot import its benchmarks ({exc})",
                        "install the profile extra: pip install torch==2.13.0 && pip install -e '.[profile]'") from None
    result = run_profile(sections=sections, quick=args.quick, nvme_path=args.nvme_path,
                         show_progress=not args.json and sys.stderr.isatty(), collectives_from=args.collectives_from)
    text = result.profile.to_json()
    args.out.write_text(text + "\n")
    if args.json:
        print(text)
    else:
        result.print_summary(sys.stdout)
        print(f"profile written to {args.out}")
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.upload:
        status, location = upload(args.upload, text)
        where = f", stored as {location}" if location else ""
        print(f"uploaded to {upload_url(args.upload)} (HTTP {status}{where})", file=sys.stderr)
    if result.interrupted:
        print("interrupted: the profile holds what was measured before Ctrl-C", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0
