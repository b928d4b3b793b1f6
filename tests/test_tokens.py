"""Bearer tokens: deployment administrators list, issue (with an expiry) and revoke them over
HTTP and with ``dream admin token``, and a revocation is refused by every API process on its
very next request, because authentication reads the token from the store each time.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

import domain.errors as domain
from adapters.cli.main import main
from adapters.http.app import create_app
from adapters.http.server import running_server
from adapters.settings import Settings
from adapters.store.persistence import open_dreaming
from application.access import token_hash
from domain.ids import scope_aggregate_id
from domain.policy import Caller
from domain.principal import AccessToken, Principal
from dream_client import DreamClient
from dream_client import errors as client_errors
from dream_client.errors import ApiError
from tests.conftest import LiveApi

SERVE_STARTUP_SECONDS = 60.0


def refused(call: Callable[[], object]) -> ApiError:
    with pytest.raises(ApiError) as error:
        call()
    return error.value


def status_of(base_url: str, token: str, path: str = "/v1/scopes/team") -> httpx.Response:
    return httpx.get(base_url + path, headers={"Authorization": f"Bearer {token}"},
                     timeout=10)


# -- HTTP --------------------------------------------------------------------------------------

def test_an_administrator_issues_lists_and_revokes_tokens(live_api: LiveApi) -> None:
    admin = DreamClient(live_api.base_url, live_api.admin_token)
    admin.scopes.create("team")

    # Rita is new: issuing her a token registers her, and the secret is in this answer only.
    issued = admin.tokens.issue(principal="rita", label="laptop", expires_in_seconds=3600)
    assert issued.token.startswith("dream_")
    assert (issued.principal, issued.label, issued.revoked, issued.expired) == (
        "rita", "laptop", False, False)
    assert issued.position is not None
    assert issued.expires_at is not None
    lifetime = issued.expires_at - issued.created_at
    assert timedelta(seconds=3590) < lifetime <= timedelta(seconds=3600)
    admin.access.grant_role("team", principal="rita", role="reader")
    assert status_of(live_api.base_url, issued.token).status_code == 200

    # The list shows every token's public record and never a secret (nor its hash).
    raw = httpx.get(live_api.base_url + "/v1/admin/tokens", headers=live_api.headers(),
                    timeout=10)
    assert raw.status_code == 200
    assert issued.token not in raw.text
    assert live_api.admin_token not in raw.text
    assert "hash" not in raw.text
    listed = admin.tokens.list().tokens
    assert [(t.principal, t.label, t.expires_at is None) for t in listed] == [
        ("admin", "bootstrap", True), ("rita", "laptop", False)]
    assert listed[1].token_id == issued.token_id
    assert [t.token_id for t in admin.tokens.list(principal="rita").tokens] == [
        issued.token_id]
    assert admin.tokens.list(principal="nobody").tokens == []

    # Only deployment administrators manage tokens.
    with DreamClient(live_api.base_url, issued.token) as rita:
        for call in (rita.tokens.list, lambda: rita.tokens.revoke(issued.token_id),
                     lambda: rita.tokens.issue(principal="rita")):
            error = refused(call)
            assert (error.status, error.code) == (403, "forbidden")

    # Revoked: refused on the next request, and listed as revoked.
    revoked = admin.tokens.revoke(issued.token_id)
    assert revoked.revoked is True
    assert revoked.position is not None
    answer = status_of(live_api.base_url, issued.token)
    assert (answer.status_code, answer.json()["error"]["code"]) == (401, "unauthorized")
    assert [t.revoked for t in admin.tokens.list(principal="rita").tokens] == [True]
    # Revoking again changes nothing and names the token's last event.
    head = live_api.dreaming.store.max_position()
    again = admin.tokens.revoke(issued.token_id)
    assert (again.revoked, again.position) == (True, revoked.position)
    assert live_api.dreaming.store.max_position() == head

    # Ids that name no token: 404 token_not_found, whatever they look like (the scope's own
    # aggregate id included).
    scope_like = "tok_" + scope_aggregate_id("team").hex
    for token_id in (scope_like, "tok_" + "0" * 32, "tok_nothex", issued.token, "admin"):
        error = refused(lambda token_id=token_id: admin.tokens.revoke(token_id))
        assert (error.status, error.code) == (404, "token_not_found")
    assert isinstance(refused(lambda: admin.tokens.revoke(scope_like)),
                      client_errors.TokenNotFoundError)
    assert live_api.dreaming.store.max_position() == head
    admin.close()


def test_expired_tokens_are_refused_with_their_own_code(live_api: LiveApi) -> None:
    admin = DreamClient(live_api.base_url, live_api.admin_token)
    admin.scopes.create("team")
    brief = admin.tokens.issue(principal="temp", expires_in_seconds=1)
    admin.access.grant_role("team", principal="temp", role="reader")
    assert status_of(live_api.base_url, brief.token).status_code == 200
    assert brief.expires_at is not None
    time.sleep(max(0.0, (brief.expires_at - datetime.now(UTC)).total_seconds()) + 0.2)

    answer = status_of(live_api.base_url, brief.token)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "token_expired"
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert [(t.expired, t.revoked) for t in admin.tokens.list(principal="temp").tokens] == [
        (True, False)]

    # An explicit instant works the same way; it must be in the future, zoned, and single.
    later = datetime.now(UTC) + timedelta(days=1)
    dated = admin.tokens.issue(principal="temp", expires_at=later)
    assert dated.expires_at == later
    assert status_of(live_api.base_url, dated.token).status_code == 200
    head = live_api.dreaming.store.max_position()
    for body in ({"expires_in_seconds": 0}, {"expires_in_seconds": -5},
                 {"expires_in_seconds": 10**12},
                 {"expires_at": "2001-01-01T00:00:00Z"},
                 {"expires_at": later.replace(tzinfo=None).isoformat()},
                 {"expires_in_seconds": 60, "expires_at": later.isoformat()}):
        raw = httpx.post(live_api.base_url + "/v1/admin/tokens", headers=live_api.headers(),
                         json={"principal": "temp", **body}, timeout=10)
        assert (raw.status_code, raw.json()["error"]["code"]) == (422, "invalid_expiry"), body
    # A token never silently carries other rights than asked for.
    raw = httpx.post(live_api.base_url + "/v1/admin/tokens", headers=live_api.headers(),
                     json={"principal": "temp", "admin": True}, timeout=10)
    assert (raw.status_code, raw.json()["error"]["code"]) == (409, "principal_exists")
    assert live_api.dreaming.store.max_position() == head
    admin.close()


def test_a_token_issued_before_expiry_existed_still_replays_and_never_expires() -> None:
    token = AccessToken.issue("f" * 64, "old-timer", "legacy")
    issued = token.collect_events()[0]
    old_state = {k: v for k, v in vars(issued).items() if k != "expires_at"}
    old = object.__new__(type(issued))
    object.__setattr__(old, "__dict__", old_state)  # as the store decodes an old event

    replayed = old.mutate(None)
    assert isinstance(replayed, AccessToken)
    assert (replayed.principal, replayed.label, replayed.expires_at) == (
        "old-timer", "legacy", None)
    replayed.check_usable(datetime.now(UTC) + timedelta(days=10_000))


# -- across processes --------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def store_env(settings: Settings) -> dict[str, str]:
    env = {**os.environ, "DREAM_DATA_DIR": str(settings.data_dir), "DREAM_ACCESS": "enforced",
           "DREAM_WORKERS": "0"}
    env.pop("DREAM_DATABASE_URL", None)
    if settings.database_url:
        env["DREAM_DATABASE_URL"] = settings.database_url
    return env


@contextmanager
def dream_serve(settings: Settings, log: Path) -> Iterator[str]:
    """``dream serve`` in its own process on ``settings``' store; yields its base URL."""
    port = free_port()
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "adapters.cli", "serve", "--port", str(port)],
            env=store_env(settings), stdout=output, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVE_STARTUP_SECONDS
        while True:
            assert process.poll() is None, log.read_text()
            try:
                httpx.get(base_url + "/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        yield base_url
    finally:
        process.terminate()
        process.wait(20)


def dream_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args],
                          env=store_env(settings), capture_output=True, text=True,
                          timeout=120, check=False)


def in_process_cli(capsys: pytest.CaptureFixture[str], settings: Settings,
                   *args: str) -> tuple[int, str, str]:
    """``dream`` through its entry point in this process (for output checks; the commands
    that must come from another process use :func:`dream_cli`)."""
    store = (["--database-url", settings.database_url] if settings.database_url
             else ["--data-dir", str(settings.data_dir)])
    capsys.readouterr()
    code = main([*args, *store])
    out, err = capsys.readouterr()
    return code, out, err


def listed(capsys: pytest.CaptureFixture[str], settings: Settings,
           *args: str) -> list[dict[str, Any]]:
    code, out, err = in_process_cli(capsys, settings, "admin", "token", "list", "--json", *args)
    assert code == 0, err
    tokens: list[dict[str, Any]] = json.loads(out)["tokens"]
    return tokens


def test_a_revocation_is_refused_by_every_process_on_its_next_request(
        settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    enforced = settings.model_copy(update={"access": "enforced"})
    log = tmp_path / "serve.log"
    with dream_serve(enforced, log) as first_url:
        # The first enforced start writes the bootstrap token to a private file only.
        token_file = enforced.data_dir / "admin-token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        admin_token = token_file.read_text().strip()
        output = log.read_text()
        assert str(token_file) in output
        assert admin_token not in output
        assert not list(enforced.data_dir.glob(".admin-token-*"))  # no scratch file left

        # A second API process on the same store (no read models: none are needed here).
        second_app = open_dreaming(enforced)
        second = running_server(create_app(second_app, enforced), lifespan="off")
        with second as second_url, DreamClient(first_url, admin_token) as admin:
            admin.scopes.create("team")
            rita = admin.tokens.issue(principal="rita", label="ci")
            admin.access.grant_role("team", principal="rita", role="reader")
            for url in (first_url, second_url):
                assert status_of(url, rita.token).status_code == 200

            # Revoked through the first process: the second refuses her next request.
            admin.tokens.revoke(rita.token_id)
            for url in (second_url, first_url):
                answer = status_of(url, rita.token)
                assert (answer.status_code, answer.json()["error"]["code"]) == (
                    401, "unauthorized")

            # The CLI (a third process) issues, lists and revokes, straight on the store.
            created = dream_cli(enforced, "admin", "token", "create", "--principal", "carl",
                                "--scope", "team", "--role", "reader", "--expires-in", "600",
                                "--json")
            assert created.returncode == 0, created.stderr
            carl = json.loads(created.stdout)
            assert carl["expires_at"] is not None
            for url in (first_url, second_url):
                assert status_of(url, carl["token"]).status_code == 200
            records = listed(capsys, enforced)
            assert [(r["principal"], r["revoked"]) for r in records] == [
                ("admin", False), ("rita", True), ("carl", False)]
            assert all(r["token_id"].startswith("tok_") for r in records)
            assert carl["token"] not in json.dumps(records)
            assert [r["token_id"] for r in listed(capsys, enforced, "--principal", "carl")] == [
                carl["token_id"]]
            _, out, _ = in_process_cli(capsys, enforced, "admin", "token", "list")
            text = out.splitlines()
            assert text[2].startswith(f"{carl['token_id']}  carl  cli  created ")
            assert text[1].endswith("  revoked")

            gone = dream_cli(enforced, "admin", "token", "revoke", carl["token_id"], "--json")
            assert gone.returncode == 0, gone.stderr
            assert json.loads(gone.stdout)["revoked"] is True
            for url in (first_url, second_url):
                assert status_of(url, carl["token"]).status_code == 401
            _, out, _ = in_process_cli(capsys, enforced, "admin", "token", "revoke",
                                       carl["token_id"])
            assert out.strip().endswith("revoked (already)")
            code, _, err = in_process_cli(capsys, enforced, "admin", "token", "revoke",
                                          "tok_" + "a" * 32)
            assert code == 1
            assert json.loads(err)["error"]["code"] == "token_not_found"
            # The bootstrap token was never touched.
            assert status_of(first_url, admin_token, "/v1/admin/tokens").status_code == 200
        second_app.close()


def test_token_commands_explain_themselves(capsys: pytest.CaptureFixture[str]) -> None:
    for command, words in (("list", ["never", "revoked"]),
                           ("revoke", ["next request", "token_id"]),
                           ("create", ["--expires-in", "--expires-at", "only time"])):
        with pytest.raises(SystemExit):
            main(["admin", "token", command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for word in words:
            assert word in text, (command, word)


def test_authentication_reads_the_token_each_time_and_the_principal_once(
        enforced_app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A principal's admin flag never changes after registration; a token can be revoked."""

    admin = Caller("admin", admin=True)
    enforced_app.access.register_principal(admin, "rita")
    token = enforced_app.access.issue_token(admin, "rita").value
    loads: list[Any] = []
    original = enforced_app.store._rebuild

    def counted(aggregate_id: Any, *args: Any) -> Any:
        loads.append(aggregate_id)
        return original(aggregate_id, *args)

    monkeypatch.setattr(enforced_app.store, "_rebuild", counted)
    for _ in range(3):
        assert enforced_app.access.authenticate(token) == Caller("rita", admin=False)
    assert loads.count(Principal.create_id("rita")) == 1
    assert loads.count(AccessToken.create_id(token_hash(token))) == 3
    enforced_app.access.revoke_token(admin, token)
    with pytest.raises(domain.UnauthorizedError):
        enforced_app.access.authenticate(token)
