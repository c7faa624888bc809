"""Shared-storage search: several workers on one Optuna study in PostgreSQL, wall time to the answer.

    python benchmarks/shared_storage.py [--workers 2] [--admin-url postgresql://postgres@127.0.0.1:5432/test]
                                        [--case gpt3-175b-1024xa100] [--json]

Creates a throwaway database on the server, starts ``--workers`` ``autopar search ... --storage
URL --study-name NAME`` processes at once, waits for all, and prints the wall time, each worker's
answer (valid, evaluated, best tokens/s) and whether they agree; then drops the database. The
issue's target: GPT-3 175B on 1024 A100 in under 60 s with two workers. The exhaustive sweep of
the same question in one process (no storage) runs alongside for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "gpt3-175b-1024xa100": ["--model", "gpt3-175b", "--cluster", "dgx-a100-80gb", "--nodes", "128",
                            "--global-batch", "1536"],
    "llama3-70b-64xh100": ["--model", "llama3-70b", "--cluster", "dgx-h100", "--nodes", "8",
                           "--global-batch", "512"],
}


def _autopar(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "service.cli", "search", *args, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _answer(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=900)
    if proc.returncode != 0:
        return {"error": err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"}
    doc = json.loads(out)
    best = doc["top"][0]["prediction"]["tokens_per_s"] if doc["top"] else None
    return {"n_valid": doc["n_valid"], "n_feasible": doc["n_feasible"], "n_evaluated": doc["n_evaluated"],
            "best_tokens_per_s": best}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--admin-url", default=os.environ.get("AUTOPAR_TEST_POSTGRES_ADMIN_URL",
                                                              "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--case", default="gpt3-175b-1024xa100", choices=sorted(CASES))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import psycopg

    name = f"autopar_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(args.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = args.admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1) + f"/{name}"
    try:
        question = CASES[args.case]
        start = time.perf_counter()
        solo = _autopar(question)
        solo_answer = _answer(solo)
        solo_s = time.perf_counter() - start
        start = time.perf_counter()
        procs = [_autopar([*question, "--storage", url, "--study-name", "bench"]) for _ in range(args.workers)]
        answers = [_answer(p) for p in procs]
        shared_s = time.perf_counter() - start
    finally:
        with psycopg.connect(args.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    agree = len({json.dumps(a, sort_keys=True) for a in answers}) == 1
    same_best = agree and answers[0].get("best_tokens_per_s") == solo_answer.get("best_tokens_per_s")
    report = {"case": args.case, "workers": args.workers, "shared_wall_s": round(shared_s, 2),
              "single_process_wall_s": round(solo_s, 2), "workers_agree": agree,
              "same_best_as_single_process": same_best, "answers": answers, "single_process": solo_answer}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{args.case}: {args.workers} workers on PostgreSQL {shared_s:.1f} s (one process, no storage: "
              f"{solo_s:.1f} s); workers agree: {agree}; same best as one process: {same_best}")
        for i, a in enumerate(answers):
            print(f"  worker {i}: {a}")
    return 0 if agree and same_best else 1


if __name__ == "__main__":
    raise SystemExit(main())
