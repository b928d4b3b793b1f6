"""Generate ``dream_client/models.py`` from the checked-in OpenAPI document.

Run from the repository root: ``.venv/bin/python clients/python/scripts/generate_models.py``.
The test ``tests/test_client_models.py`` regenerates into a temporary file and compares, so
the checked-in models cannot drift from ``docs/openapi.json``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OPENAPI = ROOT / "docs" / "openapi.json"
MODELS = ROOT / "clients" / "python" / "dream_client" / "models.py"
HEADER = ("# Generated from docs/openapi.json by datamodel-code-generator: do not edit.\n"
          "# Regenerate: .venv/bin/python clients/python/scripts/generate_models.py")


def generate(output: Path = MODELS) -> None:
    """Write the pydantic v2 wire models of ``docs/openapi.json`` to ``output``."""
    # The executable sits next to the running interpreter (the project's venv).
    codegen = Path(sys.executable).with_name("datamodel-codegen")
    subprocess.run([
        str(codegen), "--input", str(OPENAPI), "--input-file-type", "openapi",
        "--output", str(output), "--output-model-type", "pydantic_v2.BaseModel",
        "--target-python-version", "3.11", "--disable-timestamp",
        "--use-standard-collections", "--use-union-operator", "--use-schema-description",
        "--custom-file-header", HEADER,
    ], check=True, capture_output=True, text=True)


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else MODELS)
