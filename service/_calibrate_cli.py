"""``autopar calibrate``: fit the cost model's constants on one cluster's stored runs (issue 16).

    autopar calibrate (--cluster NAME | --profile ID) [--from-runs FILTER] [--folds K] [--seed S] [--json]

Reads the runs stored by ``POST /v1/runs`` / ``autopar runs import`` in the service's database
(AUTOPAR_DATABASE_URL, else the SQLite file in AUTOPAR_DATA_DIR), fits the time constants from the
published fit (``search._fit``), stores the calibration with its k-fold cross-validated MAPE, and
prints what moved and the error before and after. ``autopar predict`` and ``autopar search`` then
use the cluster's latest calibration (``--calibration ID|published`` picks one).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from search import AutoparError, SpecError
from service._cli_output import EXIT_CODES_HELP, EXIT_OK, Column, print_table

if TYPE_CHECKING:
    from service._calibrations import Chosen

CALIBRATION_HELP = ("the cost model's constants: a calibration id (autopar calibrate), or 'published'; default: "
                    "the cluster's latest calibration in the service's database, else the published constants")


def add_calibrate_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``calibrate`` to ``autopar``'s subparsers."""
    p = sub.add_parser("calibrate", help="fit the cost model's constants on one cluster's stored runs",
                       description="Fit the time constants on the stored runs of one cluster (or hardware profile), "
                       "from the published fit, and store them with their k-fold cross-validated error; predict "
                       "and search then use the cluster's latest.", epilog=EXIT_CODES_HELP)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--cluster", metavar="NAME", help="a cluster preset's name, or a custom cluster's "
                       "GPUNAMExGPUS_PER_NODE (as GET /v1/searches shows it)")
    which.add_argument("--profile", metavar="ID", help="the runs that name this uploaded hardware profile")
    p.add_argument("--from-runs", metavar="FILTER",
                   help="comma-separated model=NAME, search=ID, since=YYYY-MM-DD, last=N (default: every timed run)")
    p.add_argument("--folds", type=int, default=5, metavar="K", help="cross-validation folds (default: 5)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the folds (default: 0)")
    p.add_argument("--json", action="store_true", help="print the stored calibration as JSON")
    p.set_defaults(handler=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    from service import store
    from service._calibrations import calibration_out, fit, parse_filter
    from service._db_access import current_database
    from service._version import autopar_version

    if not 2 <= args.folds <= 20:
        raise SpecError("--folds", f"{args.folds} is outside 2..20", "give e.g. --folds 5")
    run_filter = parse_filter(args.from_runs, "--from-runs")
    _, db = current_database()
    try:
        try:
            row = fit(db, cluster=args.cluster, profile_id=args.profile, run_filter=run_filter, k=args.folds,
                      seed=args.seed, tenant=store.DEFAULT_TENANT, autopar_version=autopar_version())
        except SpecError as err:  # the API's field names, as the CLI spells them
            field = {"from_runs": "--from-runs", "cluster": "--cluster"}.get(err.field, err.field)
            raise SpecError(field, err.problem, err.fix.replace("from_runs", "--from-runs")) from None
        with db.session() as s:
            store.add_calibration(s, row=row)
    finally:
        db.dispose()
    out = calibration_out(row)
    if args.json:
        print(json.dumps(out, indent=2))
        return EXIT_OK
    moved = out["moved"]
    rows = [[name, f"{v['prior']:.6g}", f"{v['fitted']:.6g}"] for name, v in sorted(moved.items())]
    print_table(f"calibration {row.id} of {row.cluster_name or row.profile_id}: {row.n_runs} runs",
                [Column("constant", left=True, keep=True), Column("published", keep=True), Column("fitted", keep=True)],
                rows or [["(none moved)", "", ""]])
    print(f"cross-validated time MAPE ({row.k}-fold): {100 * row.cv_mape_before:.1f} % with the published "
          f"constants -> {100 * row.cv_mape_after:.1f} % calibrated (in sample {100 * out['in_sample_mape']:.1f} %)")
    print(f"fingerprint {row.fingerprint[:16]}; autopar predict/search use it for {row.cluster_name or 'this profile'}"
          f" from now on (--calibration published for the published constants)")
    return EXIT_OK


def cli_calibration(requested: str | None, cluster: str) -> Chosen:
    """The calibration ``autopar predict`` / ``search`` use on ``cluster``: ``requested`` (an id, or
    'published'), else the cluster's latest in the service's database when that database exists
    and answers, else the published constants. An unknown id is a SpecError naming --calibration."""
    from service._calibrations import PUBLISHED, choose
    from service._db_access import current_database

    if requested == PUBLISHED:
        return choose_published(defaulted=False)
    try:
        _, db = current_database()
    except AutoparError:
        if requested is not None:
            raise SpecError("--calibration", f"no database holds calibration {requested!r}",
                            "set AUTOPAR_DATABASE_URL or AUTOPAR_DATA_DIR to the service's, or drop "
                            "--calibration") from None
        return choose_published(defaulted=True)
    try:
        chosen: Chosen = choose(db, calibration_id=requested, cluster=cluster, profile_id=None, field="--calibration")
    finally:
        db.dispose()
    return chosen


def choose_published(*, defaulted: bool) -> Chosen:
    from search import default_calibration
    from service._calibrations import PUBLISHED, Chosen

    return Chosen(default_calibration(), PUBLISHED, None, defaulted=defaulted)
