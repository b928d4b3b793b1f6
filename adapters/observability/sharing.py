"""Where a host's processes share their metric values (no metrics library imported here).

``prometheus_client`` picks its storage when it is first imported: in memory, or, when
``PROMETHEUS_MULTIPROC_DIR`` is set, in one file per process in that directory, summed by
every scrape. A command that serves, executes runs or hosts read models calls
:func:`share_metrics` before importing anything that defines a metric."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adapters.settings import Settings

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_recording = True  # DREAM_METRICS of the command that started this process


def metrics_recorded() -> bool:
    """Whether this process counts and times what it does (``DREAM_METRICS``)."""
    return _recording


def share_metrics(settings: Settings, *, children_only: bool = False) -> None:
    """Point this process (and the processes it starts) at the host's shared metrics
    directory, unless the environment already names one. ``children_only``: for a supervisor,
    which records nothing itself and may have loaded the library already."""
    global _recording  # noqa: PLW0603 - one setting for the process, fixed at its start
    _recording = settings.metrics
    if MULTIPROC_ENV in os.environ:
        return
    if "prometheus_client" in sys.modules and not children_only:
        msg = "share_metrics must run before prometheus_client is imported"
        raise RuntimeError(msg)
    directory = settings.metrics_dir or settings.data_dir / "metrics"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.environ[MULTIPROC_ENV] = str(directory)
