"""What the ``dream`` commands share: store and API options, and what they select."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from domain.errors import InvalidRequestError

if TYPE_CHECKING:
    from adapters.settings import Settings
    from dream_client import DreamClient

Commands = Any  # argparse's private _SubParsersAction
BATCH_STORE_TIMEOUT_SECONDS = 30
AFTER_HELP = ("an event position the answer must include, e.g. a position `dream show` "
              "printed; every list already includes what was recorded before it was asked")
CURSOR_HELP = "continue after a page (the `more: --cursor` value a list printed)"


def settings_from(args: argparse.Namespace) -> Settings:
    """The ``DREAM_*`` settings, with the store the command's options name instead."""
    from adapters.settings import Settings  # noqa: PLC0415 - `--help` and usage errors need none
    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    if getattr(args, "database_url", None):
        overrides["database_url"] = args.database_url
    return Settings(**overrides)


def batch_settings_from(args: argparse.Namespace) -> Settings:
    """``settings_from`` for a one-shot command that opens the store beside a running service
    (an audit, an export, a token issued): it opens every connection afresh, and a database busy
    serving may take longer than ``DREAM_STORE_TIMEOUT_SECONDS`` (meant for requests, which
    find their pool's connections open) to start each one. So, unless that variable is set, it
    waits up to ``BATCH_STORE_TIMEOUT_SECONDS``, once the database has answered a first
    connection: one that refuses, or does not know the database or user, fails at once."""
    return one_shot(settings_from(args))


def one_shot(settings: Settings) -> Settings:
    """``settings`` as ``batch_settings_from`` makes them (a PostgreSQL store probed once)."""
    if not settings.database_url or "store_timeout_seconds" in settings.model_fields_set:
        return settings
    from adapters.store.database_url import require_answer  # noqa: PLC0415 - keeps start fast

    require_answer(settings.database_url, BATCH_STORE_TIMEOUT_SECONDS)
    return settings.model_copy(update={"store_timeout_seconds": BATCH_STORE_TIMEOUT_SECONDS})


def client_from(args: argparse.Namespace) -> DreamClient:
    """A client for the API at ``--url``, with ``--token``, ``DREAM_TOKEN`` or the admin-token
    file of the data directory, whichever comes first."""
    from dream_client import DreamClient  # noqa: PLC0415 - keeps the CLI start fast

    settings = settings_from(args)
    token = args.token or settings.token or None  # an empty DREAM_TOKEN is no token
    token_file = settings.data_dir / "admin-token"
    if token is None and token_file.is_file():
        token = token_file.read_text().strip()
    return DreamClient(args.url or settings.url, token)


def add_client_options(parser: argparse.ArgumentParser, *, scope: bool = True) -> None:
    if scope:
        parser.add_argument("--scope", required=True, help="the scope (tenant) to act in")
    parser.add_argument("--url", help="API base URL (DREAM_URL; default http://127.0.0.1:8787)")
    parser.add_argument("--token", help="bearer token (DREAM_TOKEN; default: the data "
                                        "directory's admin-token file)")
    parser.add_argument("--data-dir", help="where admin-token is looked up (DREAM_DATA_DIR; "
                                           "default ./.dream)")
    parser.add_argument("--json", action="store_true", help="print JSON only")


def add_store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", help="embedded store directory (DREAM_DATA_DIR; "
                                           "default ./.dream)")
    parser.add_argument("--database-url", help="a postgresql:// URL: use PostgreSQL instead of "
                                               "the embedded store (DREAM_DATABASE_URL)")


def json_value(raw: str, option: str) -> Any:
    """An option's JSON: inline, or ``@path`` to a file holding it."""
    try:
        return json.loads(Path(raw[1:]).read_text() if raw.startswith("@") else raw)
    except (OSError, ValueError) as error:
        raise InvalidRequestError(f"{option} is not readable JSON: {error}",
                                  field=option) from None


def split_pair(value: str, option: str, first: str, second: str) -> dict[str, str]:
    """``A/B`` as ``{first: A, second: B}`` (B may hold more slashes)."""
    head, slash, tail = value.partition("/")
    if not slash or not head or not tail:
        raise InvalidRequestError(f"{option} {value!r} must look like A/B", field=option)
    return {first: head, second: tail}
