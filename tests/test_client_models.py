"""The client's checked-in wire models are exactly what the generator makes of docs/openapi.json."""

from __future__ import annotations

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "clients" / "python" / "scripts" / "generate_models.py"


def test_checked_in_models_match_the_openapi_document(tmp_path: Path) -> None:
    generator = runpy.run_path(str(SCRIPT))
    fresh = tmp_path / "models.py"
    generator["generate"](fresh)
    checked_in = generator["MODELS"].read_text(encoding="utf-8")
    assert fresh.read_text(encoding="utf-8") == checked_in, (
        "clients/python/dream_client/models.py is stale: run "
        ".venv/bin/python clients/python/scripts/generate_models.py")
