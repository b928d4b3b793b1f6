"""The embedded store refuses a data directory on a network file system, where SQLite's WAL
cannot keep the processes sharing it exact (ADR-0026), before it opens anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.cli.main import main
from adapters.store import local_disk
from adapters.store.local_disk import UnsafeDataDirError, file_system_of, require_local_disk

TABLE = """\
/dev/sda1 / ext4 rw,relatime 0 0
proc /proc proc rw 0 0
server:/export /mnt/share nfs4 rw,vers=4.2 0 0
/dev/sdb1 /mnt/share/local ext4 rw 0 0
//nas/team /mnt/with\\040space cifs rw 0 0
"""


@pytest.mark.parametrize(("path", "kind"), [
    ("/home/dream/.dream", "ext4"),
    ("/mnt/share", "nfs4"),
    ("/mnt/share/team/.dream", "nfs4"),
    ("/mnt/share/local/.dream", "ext4"),  # a local disk mounted inside the share
    ("/mnt/sharex/.dream", "ext4"),  # a sibling whose name starts alike
    ("/mnt/with space/.dream", "cifs"),  # /proc/mounts escapes the space
])
def test_the_deepest_mount_above_a_path_names_its_file_system(path: str, kind: str) -> None:
    assert file_system_of(Path(path), TABLE) == kind


def mount_table(tmp_path: Path, kind: str) -> Path:
    table = tmp_path / "mounts"
    table.write_text(f"/dev/sda1 / ext4 rw 0 0\nserver:/x {tmp_path} {kind} rw 0 0\n")
    return table


def test_a_network_data_dir_is_refused_and_a_local_one_is_not(tmp_path: Path) -> None:
    with pytest.raises(UnsafeDataDirError) as refused:
        require_local_disk(tmp_path / "data", mount_table(tmp_path, "nfs4"))
    assert refused.value.details == {"data_dir": str(tmp_path / "data"), "file_system": "nfs4"}
    require_local_disk(tmp_path / "data", mount_table(tmp_path, "xfs"))
    require_local_disk(tmp_path / "data", tmp_path / "no-mount-table")  # not Linux: no check


def test_a_store_command_on_a_network_data_dir_says_why_and_creates_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The mount table is the one thing faked: no network file system can be mounted here."""
    monkeypatch.setattr(local_disk, "MOUNTS", mount_table(tmp_path, "nfs4"))
    data = tmp_path / "data"
    assert main(["admin", "token", "list", "--data-dir", str(data)]) == 1
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["code"] == "unsafe_data_dir"
    assert "network file system (nfs4)" in error["message"]
    assert "DREAM_DATABASE_URL" in error["message"]
    assert not (data / "events.sqlite3").exists()
