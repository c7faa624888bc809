"""``autopar db | token``: migrate the service database, and create, list and revoke API tokens.

    autopar db upgrade [REV] | downgrade REV [--yes] | current
    autopar token create --scope read|write|admin [--tenant NAME] [--name NAME] [--json] | list [--json] | revoke ID

A downgrade that would drop tables holding rows needs ``--yes``; tokens are printed once at
creation and stored as SHA-256 only.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from search import SpecError
from service._db_access import current_database, open_database

if TYPE_CHECKING:
    from service.store import Database


def add_admin_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``db`` and ``token`` to ``autopar``'s subparsers."""
    d = sub.add_parser("db", help="migrate the service database", description="Alembic migrations of the service "
                       "database (AUTOPAR_DATABASE_URL, else the SQLite file in AUTOPAR_DATA_DIR).")
    dsub = d.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    up = dsub.add_parser("upgrade", help="apply migrations (default: up to head)")
    up.add_argument("revision", nargs="?", default="head", metavar="REV")
    down = dsub.add_parser("downgrade", help="revert migrations down to REV (base: drop every table)")
    down.add_argument("revision", metavar="REV")
    down.add_argument("--yes", action="store_true", help="drop tables even when they hold data (back it up first)")
    dsub.add_parser("current", help="the revision the database is at, and the newest one")
    d.set_defaults(handler=_db)

    t = sub.add_parser("token", help="create, list and revoke API tokens",
                       description="API tokens for the REST service: send one as 'Authorization: Bearer <token>'.")
    tsub = t.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    create = tsub.add_parser("create", help="create a token (printed once)")
    create.add_argument("--scope", required=True, metavar="read|write|admin",
                        help="write includes read; admin includes write and cancels any tenant's search")
    create.add_argument("--tenant", default="default", metavar="NAME",
                        help="whose token it is: what it creates records the tenant, and it cancels only the "
                             "tenant's searches (default: default)")
    create.add_argument("--name", default="unnamed", help="what the token is for (default: unnamed)")
    create.add_argument("--json", action="store_true", help="print the token and its id as JSON")
    tlist = tsub.add_parser("list", help="list tokens (ids, names, tenants, scopes, dates; never the tokens)")
    tlist.add_argument("--json", action="store_true", help="print the list as JSON")
    revoke = tsub.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("token_id", metavar="ID")
    t.set_defaults(handler=_token)




# --- db ------------------------------------------------------------------------------------


def _db(args: argparse.Namespace) -> int:
    from service.store import head_revision

    _, db = open_database(must_exist=args.db_command != "upgrade")
    head = head_revision()
    try:
        db.check_integrity()
        db.check_known()
        before = db.current_revision()
        if args.db_command == "upgrade":
            db.upgrade(args.revision)  # an unknown REV is a SpecError naming the known ones
        elif args.db_command == "downgrade":
            rows = {table: n for table, n in db.row_counts().items() if n and table != "alembic_version"}
            if rows and not args.yes:
                held = ", ".join(f"{n} {table}" for table, n in rows.items())
                raise SpecError("--yes", f"downgrading to {args.revision} may drop tables that hold data "
                                f"({held}), tokens included", "back the database up, stop the servers and "
                                "workers using it, then repeat with --yes")
            db.downgrade(args.revision)
        after = db.current_revision()
    finally:
        db.dispose()
    state = "head" if after == head else f"the newest is {head}: `autopar db upgrade`"
    if args.db_command == "current":
        print(f"{after or 'none'} ({state}) on {db.safe_url}")
    else:
        change = f"{before or 'none'} -> {after or 'none'}" if before != after else f"already at {after or 'none'}"
        print(f"{args.db_command}: {change} ({state}) on {db.safe_url}")
    return 0


# --- token ---------------------------------------------------------------------------------


def _when(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC (SQLite hands back naive datetimes; they are UTC)."""
    if moment is None:
        return None
    return (moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)).isoformat(
        timespec="seconds")


def _token(args: argparse.Namespace) -> int:
    from service._tokens import check_scopes, check_tenant

    if args.token_command == "create":  # checked before the database is opened: nothing is touched
        args.scopes = check_scopes([s.strip() for s in args.scope.split(",") if s.strip()])
        check_tenant(args.tenant)
    _, db = current_database()
    try:
        return {"create": _token_create, "list": _token_list, "revoke": _token_revoke}[args.token_command](db, args)
    finally:
        db.dispose()


def _token_create(db: Database, args: argparse.Namespace) -> int:
    from service._tokens import create_token, granted_scopes

    token_id, token = create_token(db, args.name, args.scopes, args.tenant)
    scopes = granted_scopes(args.scopes)
    if args.json:
        print(json.dumps({"id": token_id, "name": args.name, "tenant": args.tenant, "scopes": scopes, "token": token,
                          "header": f"Authorization: Bearer {token}"}, indent=2))
        return 0
    print(f"token {token_id} ({args.name}, tenant {args.tenant}, scopes: {' '.join(scopes)}); shown only now, "
          f"store it:\n{token}\n"
          f"use it as:  curl -H 'Authorization: Bearer {token}' http://127.0.0.1:8000/v1/...\n"
          f"revoke it:  autopar token revoke {token_id}")
    return 0


def _token_list(db: Database, args: argparse.Namespace) -> int:
    from service.store import list_tokens

    with db.session() as s:
        rows = list_tokens(s)
    tokens = [{"id": r.id, "name": r.name, "tenant": r.tenant, "scopes": r.scopes.split(),
               "created_at": _when(r.created_at),
               "last_used_at": _when(r.last_used_at), "revoked_at": _when(r.revoked_at)} for r in rows]
    if args.json:
        print(json.dumps(tokens, indent=2))
        return 0
    if not tokens:
        print("no tokens: create one with `autopar token create --scope read|write`")
        return 0
    header = ("id", "name", "tenant", "scopes", "created", "last used", "revoked")
    table = [header, *((r.id, r.name, r.tenant, r.scopes, _when(r.created_at) or "-", _when(r.last_used_at) or "-",
                        _when(r.revoked_at) or "-") for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _token_revoke(db: Database, args: argparse.Namespace) -> int:
    from service._tokens import revoke_token
    from service.store import get_token

    if revoke_token(db, args.token_id):
        print(f"revoked {args.token_id}: the API refuses it within seconds (its token cache)")
        return 0
    with db.session() as s:
        row = get_token(s, token_id=args.token_id)
    if row is None:
        raise SpecError("ID", f"there is no token {args.token_id!r}", "see the ids with `autopar token list`")
    print(f"{args.token_id} was already revoked at {_when(row.revoked_at)}")
    return 0
