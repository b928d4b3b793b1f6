"""The bad-input sweep of the newer commands: `dream backup|restore|export|import|migrate` on
a store, `dream scope list|status` and `dream webhook ...` over the API, `dream completion`.

Each bad input (a missing or unusable path, a backup or bundle cut short or edited, an unknown
scope, a bad cursor or limit, a bad URL, an unknown shell) ends the real command line with exit
1 and one stable error code in the API's envelope on stderr, never a traceback; an argument the
parser itself refuses ends with argparse's usage and exit 2. And nothing changes: every file of
the store's directory keeps its bytes (SQLite files: their size and modification time, since
only SQLite may open them), no target appears, and the served store records no event.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from adapters.settings import Settings
from adapters.store.bundles import Trailer, read_bundle
from adapters.store.migration import EventChain
from adapters.store.persistence import open_dreaming
from domain.policy import LOCAL
from tests.conftest import LiveApi

STORE_FILE = re.compile(r"\.sqlite3(-wal|-shm|-journal)?$")
UNREACHABLE_POSTGRES = "postgresql://nobody@127.0.0.1:1/nothing"


def dream(*args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DREAM_")}
    return subprocess.run([sys.executable, "-m", "adapters.cli", *args], capture_output=True,
                          text=True, timeout=120, check=False, env=env)


def assert_refused(done: subprocess.CompletedProcess[str], code: str) -> None:
    """Exit 1, nothing on stdout, and one error in the envelope on stderr."""
    assert "Traceback" not in done.stderr, done.stderr
    if code == "usage":
        assert done.returncode == 2, done
        assert done.stderr.startswith("usage: dream"), done.stderr
        assert "error:" in done.stderr
        return
    assert done.returncode == 1, done
    assert done.stdout == ""
    body = json.loads(done.stderr.strip().splitlines()[-1])
    assert set(body) == {"error"}, done.stderr
    assert set(body["error"]) == {"code", "message", "details"}, done.stderr
    assert body["error"]["code"] == code, done.stderr
    assert body["error"]["message"], done.stderr


def snapshot(root: Path) -> dict[str, Any]:
    """Every path under ``root``: a file's sha256, an SQLite file's size and mtime."""
    found: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_dir():
            found[name] = "dir"
        elif STORE_FILE.search(path.name):
            stat = path.stat()
            found[name] = (stat.st_size, stat.st_mtime_ns)
        else:
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


# -- the store-direct commands -----------------------------------------------------------------

@dataclass(frozen=True)
class Files:
    """A store with scope ``s``; its backup and bundles; another store; a plain file."""

    root: Path

    @property
    def data(self) -> str:
        return str(self.root / "data")

    @property
    def other(self) -> str:
        return str(self.root / "other")

    def __truediv__(self, name: str) -> str:
        return str(self.root / name)


def _store_with(data_dir: Path, scope: str) -> None:
    app = open_dreaming(Settings(data_dir=data_dir, access="disabled", workers=0))
    try:
        app.records.create_scope(LOCAL, scope)
        app.records.record_source(LOCAL, scope, "task", "t1", text="did the thing")
        app.records.record_source(LOCAL, scope, "task", "t2", text="did another thing")
    finally:
        app.close()


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _bad_backups(files: Files) -> None:
    good = Path(files / "backup")
    manifest = json.loads((good / "manifest.json").read_text())
    copy = (good / "events.backup").read_bytes()
    edited = Path(files / "backup-edited")
    _write(edited / "events.backup", copy[:-1] + bytes([copy[-1] ^ 1]))
    _write(edited / "manifest.json", json.dumps(manifest).encode())
    cut = copy[: len(copy) // 2]
    rewritten = {**manifest, "sha256": "sha256:" + hashlib.sha256(cut).hexdigest()}
    _write(Path(files / "backup-cut") / "events.backup", cut)
    _write(Path(files / "backup-cut") / "manifest.json", json.dumps(rewritten).encode())
    _write(Path(files / "backup-unreadable") / "events.backup", copy)
    _write(Path(files / "backup-unreadable") / "manifest.json", b"{not json")
    _write(Path(files / "backup-format") / "events.backup", copy)
    _write(Path(files / "backup-format") / "manifest.json",
           json.dumps({**manifest, "format": "another.backup.v9"}).encode())


def _bad_bundles(files: Files) -> None:
    lines = Path(files / "s.jsonl").read_bytes().splitlines(keepends=True)
    header, *events, trailer = lines
    assert len(events) >= 2, lines
    bundles = {
        "empty.jsonl": b"",
        "garbage.jsonl": bytes(range(256)),
        "no-trailer.jsonl": b"".join(lines[:-1]),
        "line-dropped.jsonl": b"".join([header, *events[1:], trailer]),
        "cut-mid-line.jsonl": b"".join(lines)[:-20],
        "swapped.jsonl": b"".join([header, events[1], events[0], *events[2:], trailer]),
        "count-edited.jsonl": b"".join([header, *events,
                                        re.sub(rb'"events":\d+', b'"events":99', trailer)]),
        "state-edited.jsonl": b"".join([header, events[0][:-30] + (
            b"A" if events[0][-30:-29] != b"A" else b"B") + events[0][-29:], *events[1:],
                                        trailer]),
        "schema-version.jsonl": b"".join([re.sub(rb'"schema_version":\d+',
                                                 b'"schema_version":99', header), *events,
                                          trailer]),
    }
    for name, data in bundles.items():
        _write(Path(files / name), data)
    good = Path(files / "s.jsonl")
    _write(Path(files / "rechained.jsonl"), _rechained(good, state=b"\xff not json"))
    _write(Path(files / "unknown-topic.jsonl"), _rechained(good, topic="nowhere:Nothing"))
    _write(Path(files / "not-an-event.jsonl"), _rechained(good, topic="domain.errors:DomainError"))
    msgpack = Path(files / "s.msgpack").read_bytes()
    _write(Path(files / "cut.msgpack"), msgpack[: len(msgpack) - 7])


def _rechained(bundle: Path, **change: Any) -> bytes:
    """The bundle with its first event changed, and the chain and count computed again over
    it, as one who edits a bundle on purpose would."""
    read = read_bundle(bundle)
    first, *rest = read.events
    events = [msgspec.structs.replace(first, **change), *rest]
    chain = EventChain()
    for event in events:
        chain.add(event)
    # The keys travel unchanged: only the event is what the refusal is about.
    records = [read.header, *events, *read.keys,
               Trailer(chain.events, chain.digest, read.trailer.keys, read.trailer.keys_chain)]
    return b"".join(msgspec.json.encode(record) + b"\n" for record in records)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    found = Files(tmp_path_factory.mktemp("bad-input"))
    _store_with(Path(found.data), "s")
    _store_with(Path(found.other), "o")
    Path(found / "a-file").write_text("not a directory\n")
    for args in (("backup", "--data-dir", found.data, "--to", found / "backup"),
                 ("export", "--data-dir", found.data, "--scope", "s", "--to", found / "s.jsonl"),
                 ("export", "--data-dir", found.data, "--scope", "s", "--to",
                  found / "s.msgpack", "--format", "msgpack")):
        done = dream(*args)
        assert done.returncode == 0, done.stderr
    _bad_backups(found)
    _bad_bundles(found)
    return found


@dataclass(frozen=True)
class Case:
    name: str
    args: Callable[[Files], list[str]]
    code: str
    absent: Callable[[Files], list[str]] = lambda f: []  # paths the command must not create
    marks: tuple[Any, ...] = ()


def _import_of(bundle: str) -> Callable[[Files], list[str]]:
    return lambda f: ["import", "--from", f / bundle, "--data-dir", f / "target"]


STORE_CASES = [
    # dream backup
    Case("backup into an existing directory",
         lambda f: ["backup", "--data-dir", f.data, "--to", f / "backup"], "backup_refused"),
    Case("backup of a directory without a store",
         lambda f: ["backup", "--data-dir", f / "nothing", "--to", f / "new-backup"],
         "backup_refused", lambda f: [f / "new-backup"]),
    Case("backup under a file",
         lambda f: ["backup", "--data-dir", f.data, "--to", f / "a-file/backup"],
         "invalid_path"),
    Case("backup of PostgreSQL",
         lambda f: ["backup", "--database-url", UNREACHABLE_POSTGRES, "--to", f / "pg-backup"],
         "backup_refused", lambda f: [f / "pg-backup"]),
    Case("backup without --to", lambda f: ["backup", "--data-dir", f.data], "usage"),
    # dream restore
    Case("restore of a missing backup",
         lambda f: ["restore", "--from", f / "no-backup", "--data-dir", f / "restored"],
         "backup_invalid", lambda f: [f / "restored"]),
    Case("restore of a file",
         lambda f: ["restore", "--from", f / "a-file", "--data-dir", f / "restored"],
         "backup_invalid", lambda f: [f / "restored"]),
    Case("restore of an edited backup",
         lambda f: ["restore", "--from", f / "backup-edited", "--data-dir", f / "restored"],
         "backup_invalid", lambda f: [f / "restored"]),
    Case("restore of a backup cut short, its manifest rewritten to match",
         lambda f: ["restore", "--from", f / "backup-cut", "--data-dir", f / "restored"],
         "backup_invalid", lambda f: [f / "restored"]),
    Case("restore with an unreadable manifest",
         lambda f: ["restore", "--from", f / "backup-unreadable", "--data-dir",
                    f / "restored"], "backup_invalid", lambda f: [f / "restored"]),
    Case("restore of an unknown backup format",
         lambda f: ["restore", "--from", f / "backup-format", "--data-dir", f / "restored"],
         "backup_invalid", lambda f: [f / "restored"]),
    Case("restore over a store",
         lambda f: ["restore", "--from", f / "backup", "--data-dir", f.data],
         "backup_refused"),
    Case("restore under a file",
         lambda f: ["restore", "--from", f / "backup", "--data-dir", f / "a-file/restored"],
         "invalid_path"),
    Case("restore into PostgreSQL",
         lambda f: ["restore", "--from", f / "backup", "--database-url", UNREACHABLE_POSTGRES],
         "backup_refused"),
    # dream export
    Case("export of nothing named",
         lambda f: ["export", "--data-dir", f.data, "--to", f / "new.jsonl"],
         "invalid_request", lambda f: [f / "new.jsonl"]),
    Case("export over a file",
         lambda f: ["export", "--data-dir", f.data, "--scope", "s", "--to", f / "s.jsonl"],
         "invalid_path"),
    Case("export into a missing directory",
         lambda f: ["export", "--data-dir", f.data, "--scope", "s", "--to",
                    f / "missing/new.jsonl"], "invalid_path", lambda f: [f / "missing"]),
    Case("export of an unknown format",
         lambda f: ["export", "--data-dir", f.data, "--scope", "s", "--to", f / "new.jsonl",
                    "--format", "xml"], "usage", lambda f: [f / "new.jsonl"]),
    Case("export from an unreachable PostgreSQL",
         lambda f: ["export", "--database-url", UNREACHABLE_POSTGRES, "--scope", "s", "--to",
                    f / "new.jsonl"], "store_unavailable", lambda f: [f / "new.jsonl"]),
    Case("export of an unknown scope",
         lambda f: ["export", "--data-dir", f.data, "--scope", "nope", "--to",
                    f / "new.jsonl"], "scope_not_found", lambda f: [f / "new.jsonl"]),
    Case("export of a scope id no scope may have",
         lambda f: ["export", "--data-dir", f.data, "--scope", "../x", "--to",
                    f / "new.jsonl"], "scope_not_found", lambda f: [f / "new.jsonl"]),
    Case("export of a directory without a store",
         lambda f: ["export", "--data-dir", f / "nothing", "--scope", "s", "--to",
                    f / "new.jsonl"], "export_refused",
         lambda f: [f / "new.jsonl", f / "nothing"]),
    # dream import
    Case("import of a missing bundle",
         lambda f: ["import", "--from", f / "no.jsonl", "--data-dir", f / "target"],
         "invalid_path", lambda f: [f / "target"]),
    Case("import of a directory",
         lambda f: ["import", "--from", f / "backup", "--data-dir", f / "target"],
         "invalid_path", lambda f: [f / "target"]),
    *(Case(f"import of a bundle {what}", _import_of(name), "bundle_invalid",
           lambda f: [f / "target"])
      for what, name in (("that is empty", "empty.jsonl"), ("of garbage", "garbage.jsonl"),
                         ("without its trailer", "no-trailer.jsonl"),
                         ("with a line dropped", "line-dropped.jsonl"),
                         ("cut mid-line", "cut-mid-line.jsonl"),
                         ("with two events swapped", "swapped.jsonl"),
                         ("with its count edited", "count-edited.jsonl"),
                         ("with an event's state edited", "state-edited.jsonl"),
                         ("of another schema version", "schema-version.jsonl"),
                         ("in MessagePack cut mid-frame", "cut.msgpack"),
                         ("edited and re-chained", "rechained.jsonl"),
                         ("re-chained with an unknown topic", "unknown-topic.jsonl"),
                         ("re-chained with a topic that is no event", "not-an-event.jsonl"))),
    Case("import of a bundle cut short into the store",
         lambda f: ["import", "--from", f / "line-dropped.jsonl", "--data-dir", f.data],
         "bundle_invalid"),
    Case("import of a scope the store has",
         lambda f: ["import", "--from", f / "s.jsonl", "--data-dir", f.data], "import_conflict"),
    Case("import into an unreachable PostgreSQL",
         lambda f: ["import", "--from", f / "s.jsonl", "--database-url", UNREACHABLE_POSTGRES],
         "store_unavailable"),
    # dream migrate
    Case("migrate into the same store",
         lambda f: ["migrate", "--data-dir", f.data, "--to-data-dir", f.data],
         "migration_refused"),
    Case("migrate into a store of another deployment",
         lambda f: ["migrate", "--data-dir", f.data, "--to-data-dir", f.other],
         "migration_conflict"),
    Case("migrate to a URL that is not PostgreSQL's",
         lambda f: ["migrate", "--data-dir", f.data, "--to-database-url", "mysql://h/db"],
         "invalid_request"),
    Case("migrate to a URL that does not parse",
         lambda f: ["migrate", "--data-dir", f.data, "--to-database-url", "postgresql://[::1"],
         "invalid_request"),
    Case("migrate to a URL with a port that is not a number",
         lambda f: ["migrate", "--data-dir", f.data, "--to-database-url",
                    "postgresql://u@h:port/db"], "invalid_request"),
    Case("migrate to an unreachable PostgreSQL",
         lambda f: ["migrate", "--data-dir", f.data, "--to-database-url", UNREACHABLE_POSTGRES],
         "store_unavailable"),
    Case("migrate under a file",
         lambda f: ["migrate", "--data-dir", f.data, "--to-data-dir", f / "a-file/target"],
         "invalid_path"),
    Case("migrate to two targets",
         lambda f: ["migrate", "--data-dir", f.data, "--to-data-dir", f / "target",
                    "--to-database-url", UNREACHABLE_POSTGRES], "usage",
         lambda f: [f / "target"]),
    Case("migrate from a directory without a store",
         lambda f: ["migrate", "--data-dir", f / "nothing", "--to-data-dir", f / "target"],
         "migration_refused", lambda f: [f / "nothing", f / "target"]),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=c.marks)
                                  for c in STORE_CASES])
def test_a_store_command_refuses_bad_input_and_changes_nothing(files: Files,
                                                               case: Case) -> None:
    before = snapshot(files.root)
    done = dream(*case.args(files))
    try:
        assert_refused(done, case.code)
        for path in case.absent(files):
            assert not Path(path).exists(), path
        assert snapshot(files.root) == before
    finally:  # a case that fails must not spoil the next ones
        _remove_new(files.root, before)


def _remove_new(root: Path, before: dict[str, Any]) -> None:
    for path in sorted(root.rglob("*"), reverse=True):
        if str(path.relative_to(root)) not in before:
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink()  # a new file: never one SQLite holds open


# -- the API commands ----------------------------------------------------------------------------

@pytest.fixture
def served(live_api: LiveApi) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`dream ARGS --url ... --token ...` against a server whose scope ``s`` has a webhook."""
    with httpx.Client(base_url=live_api.base_url, headers=live_api.headers(),
                      timeout=30) as http:
        assert http.post("/v1/scopes", json={"scope_id": "s"}).status_code == 201
        created = http.post("/v1/scopes/s/webhooks", json={"url": "http://127.0.0.1:9/hook"})
        assert created.status_code == 201, created.text
        revoked = http.post("/v1/scopes/s/webhooks", json={"url": "http://127.0.0.1:9/other"})
        assert revoked.status_code == 201, revoked.text
        gone = revoked.json()["webhook_id"]
        answer = http.delete(f"/v1/scopes/s/webhooks/{gone}")
        assert answer.status_code == 200, answer.text

    def run(*args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
        words = [word.replace("{revoked}", gone) for word in args]
        return dream(*words, "--url", url or live_api.base_url, "--token", live_api.admin_token)

    return run


API_CASES: list[tuple[str, list[str], str]] = [
    ("scope list with a cursor it did not issue", ["scope", "list", "--cursor", "bm90IG1pbmU"],
     "invalid_cursor"),
    ("scope list with a cursor that is not base64", ["scope", "list", "--cursor", "!!"],
     "invalid_cursor"),
    ("scope list with a zero limit", ["scope", "list", "--limit", "0"], "invalid_request"),
    ("scope list with a limit too large", ["scope", "list", "--limit", "101"],
     "invalid_request"),
    ("scope list with a limit that is not a number", ["scope", "list", "--limit", "ten"],
     "usage"),
    ("scope status of an unknown scope", ["scope", "status", "nope"], "scope_not_found"),
    # The client escapes the id as one path segment; the server routes none for it.
    ("scope status of a bad scope id", ["scope", "status", "../x"], "not_found"),
    ("webhook create to a URL that is not one", ["webhook", "create", "--scope", "s",
                                                 "not a url"], "invalid_webhook_url"),
    ("webhook create to a file URL", ["webhook", "create", "--scope", "s",
                                      "file:///etc/passwd"], "invalid_webhook_url"),
    ("webhook create with a short secret", ["webhook", "create", "--scope", "s",
                                            "http://127.0.0.1:9/x", "--secret", "short"],
     "invalid_request"),
    ("webhook create for an unknown event", ["webhook", "create", "--scope", "s",
                                             "http://127.0.0.1:9/x", "--event-type", "No.Such"],
     "invalid_event_type"),
    ("webhook create in an unknown scope", ["webhook", "create", "--scope", "nope",
                                            "http://127.0.0.1:9/x"], "scope_not_found"),
    ("webhook create without a URL", ["webhook", "create", "--scope", "s"], "usage"),
    ("webhook list of an unknown scope", ["webhook", "list", "--scope", "nope"],
     "scope_not_found"),
    ("webhook show of an unknown id", ["webhook", "show", "--scope", "s", "wh_nope"],
     "webhook_not_found"),
    ("webhook show of a bad id", ["webhook", "show", "--scope", "s", "../x"], "not_found"),
    ("webhook revoke of an unknown id", ["webhook", "revoke", "--scope", "s", "wh_nope"],
     "webhook_not_found"),
    ("webhook deliveries of an unknown id", ["webhook", "deliveries", "--scope", "s",
                                             "wh_nope"], "webhook_not_found"),
    ("webhook deliveries with a zero limit", ["webhook", "deliveries", "--scope", "s",
                                              "{revoked}", "--limit", "0"], "invalid_request"),
    ("webhook deliveries with a limit too large", ["webhook", "deliveries", "--scope", "s",
                                                   "{revoked}", "--limit", "501"],
     "invalid_request"),
    ("webhook deliveries with a limit that is not a number",
     ["webhook", "deliveries", "--scope", "s", "{revoked}", "--limit", "x"], "usage"),
    ("webhook deliveries of an unknown outcome",
     ["webhook", "deliveries", "--scope", "s", "{revoked}", "--outcome", "lost"], "usage"),
]


@pytest.mark.parametrize(("args", "code"), [pytest.param(args, code, id=name)
                                            for name, args, code in API_CASES])
def test_an_api_command_refuses_bad_input_and_records_nothing(
        served: Callable[..., subprocess.CompletedProcess[str]], live_api: LiveApi,
        args: list[str], code: str) -> None:
    before = live_api.dreaming.store.max_position()
    assert_refused(served(*args), code)
    assert live_api.dreaming.store.max_position() == before


@pytest.mark.parametrize(("url", "code"), [
    pytest.param("http://127.0.0.1:1", "connection_failed", id="nothing listening"),
    pytest.param("ftp://127.0.0.1/", "connection_failed", id="not http"),
    pytest.param("http://[::1", "invalid_request", id="does not parse"),
    pytest.param("http://127.0.0.1:port", "invalid_request", id="a port that is not a number"),
    pytest.param("not a url", "connection_failed", id="not a url"),
])
@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)  # the URL fails before any store
def test_an_api_command_refuses_a_bad_url(
        served: Callable[..., subprocess.CompletedProcess[str]], live_api: LiveApi,
        url: str, code: str) -> None:
    before = live_api.dreaming.store.max_position()
    for args in (["scope", "list"], ["scope", "status", "s"], ["webhook", "list", "--scope", "s"],
                 ["webhook", "create", "--scope", "s", "http://127.0.0.1:9/x"]):
        assert_refused(served(*args, url=url), code)
    assert live_api.dreaming.store.max_position() == before


@pytest.mark.parametrize("args", [["completion", "fish"], ["completion"],
                                  ["completion", "bash", "zsh"]],
                         ids=["unknown shell", "no shell", "two shells"])
def test_completion_refuses_what_it_cannot_write(args: list[str]) -> None:
    assert_refused(dream(*args), "usage")
