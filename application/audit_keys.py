"""The aggregate kinds an auditor can name, and how each kind's key is written in a path.

Apart from :mod:`application.audit` so the command line can name them in its help without
loading the audit (and the write model behind it) at every start.
"""

from __future__ import annotations

AUDITABLE = {
    "scope": "the scope id",
    "source": "<source_type>/<source_id>",
    "artifact": "<family>/<artifact_id>",
    "candidate": "<candidate_id>",
    "dream_run": "<run_id>",
}
