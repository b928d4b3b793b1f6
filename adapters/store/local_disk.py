"""The embedded store needs a local disk: refuse a data directory on a network file system.

SQLite in WAL mode coordinates the processes of a data directory through memory they share
(the ``-shm`` file, mapped by each), and its locks are POSIX locks. Over NFS, SMB and their
kind, neither holds between machines, or even reliably on one: processes would each see their
own WAL and lose each other's commits (ADR-0026). Starting there is refused with a clear error
instead, before any store file is opened.
"""

from __future__ import annotations

import re
from pathlib import Path

from domain.errors import DomainError

MOUNTS = Path("/proc/self/mounts")
NETWORK_FILE_SYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs", "lustre", "gpfs",
    "davfs", "fuse.sshfs", "fuse.glusterfs", "fuse.s3fs", "fuse.rclone", "fuse.gcsfuse",
})
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")  # /proc/mounts writes " " as \040, and so on


class UnsafeDataDirError(DomainError):
    code = "unsafe_data_dir"


def file_system_of(path: Path, mounts: str) -> str | None:
    """The type of the file system holding ``path`` (absolute, resolved), read from a mount
    table in the format of ``/proc/self/mounts``: the deepest mount point above it wins."""
    found: tuple[int, str | None] = (-1, None)
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:  # device, mount point, type, ...
            continue
        mount_point = Path(_OCTAL_ESCAPE.sub(lambda m: chr(int(m[1], 8)), fields[1]))
        if (path == mount_point or mount_point in path.parents) and \
                len(mount_point.parts) > found[0]:
            found = (len(mount_point.parts), fields[2])
    return found[1]


def require_local_disk(data_dir: Path, mounts: Path | None = None) -> None:
    """Raise :class:`UnsafeDataDirError` if ``data_dir`` is on a network file system. Where
    the mount table cannot be read (not Linux), nothing is checked."""
    try:
        table = (mounts or MOUNTS).read_text()
    except OSError:
        return
    kind = file_system_of(data_dir.resolve(), table)
    if kind in NETWORK_FILE_SYSTEMS:
        msg = (f"the data directory {data_dir} is on a network file system ({kind}); the "
               "embedded store needs a local disk: choose a local DREAM_DATA_DIR, or use "
               "PostgreSQL (DREAM_DATABASE_URL) to share a store between machines")
        raise UnsafeDataDirError(msg, data_dir=str(data_dir), file_system=kind)
