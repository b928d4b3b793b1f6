"""The architecture as an executable contract: layers, a pure domain, and sizes a newcomer can
read (ADR-0011). A violation fails the suite, and so CI."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = ("domain", "application", "projections", "adapters")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 50
MAX_PUBLIC_METHODS = 25
# Exceptions, each with its reason in ADR-0011.
LONG_FUNCTIONS: set[str] = set()
LARGE_CLASSES: set[str] = set()


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    executable = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert executable is not None, "import-linter is a dev dependency: make venv installs it"
    return subprocess.run([executable, "--no-cache"], cwd=cwd, capture_output=True,
                          text=True, check=False)


def test_every_import_contract_is_kept() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_the_contracts_catch_an_inward_layer_importing_an_outer_one(tmp_path: Path) -> None:
    """The same contracts on a copy of the tree where the domain imports an adapter."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for package in (*PRODUCTION, "benchmarks", "devkit"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    for package in ("adapters/api", "adapters/mcp", "adapters/http",
                    "adapters/http/routes"):  # the contracts name them
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "adapters" / "http" / "dependencies.py").write_text("")
    (tmp_path / "adapters" / "http" / "__init__.py").write_text("VALUE = 1\n")
    (tmp_path / "domain" / "rules.py").write_text("from adapters.http import VALUE\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "domain.rules -> adapters.http" in result.stdout


def modules(*packages: str) -> Iterator[Path]:
    for package in packages:
        yield from sorted((ROOT / package).rglob("*.py"))


def imported_modules(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def test_the_domain_takes_only_eventsourcing_domain_from_the_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"domain", "eventsourcing.domain", "__future__"}
    outside = {(path.relative_to(ROOT).as_posix(), name)
               for path in modules("domain") for name in imported_modules(path)
               if name not in allowed and name.split(".")[0] not in allowed - {"eventsourcing"}
               and name.split(".")[0] != "domain"}
    assert outside == set()


def test_no_production_module_is_over_500_lines() -> None:
    long = {path.relative_to(ROOT).as_posix(): lines for path in modules(*PRODUCTION)
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def definitions(path: Path) -> Iterator[tuple[str, ast.AST]]:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield f"{path.relative_to(ROOT).as_posix()}:{node.name}", node


def test_no_production_function_is_over_50_lines() -> None:
    long = {name: node.end_lineno - node.lineno + 1 for path in modules(*PRODUCTION)
            for name, node in definitions(path)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES}
    assert set(long) <= LONG_FUNCTIONS, long


def test_no_production_class_has_more_than_25_public_methods() -> None:
    large = {}
    for path in modules(*PRODUCTION):
        for name, node in definitions(path):
            if isinstance(node, ast.ClassDef):
                public = [item for item in node.body
                          if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                          and not item.name.startswith("_")]
                if len(public) > MAX_PUBLIC_METHODS:
                    large[name] = len(public)
    assert set(large) <= LARGE_CLASSES, large


def test_use_cases_are_composed_siblings_not_a_chain_of_subclasses() -> None:
    """Only the event store extends the library's Application; no use case extends another."""
    defined: set[str] = set()
    extended: dict[str, str] = {}
    for path in modules("application"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                defined.add(node.name)
                for base in node.bases:
                    extended[node.name] = ast.unparse(base)
    services = {"Principals", "ScopeGate", "Records", "DreamRuns", "Reviews", "Audit",
                "ReadModelQueries", "DreamExecutor", "Dreaming"}
    assert services <= defined
    assert services.isdisjoint(extended), {name: extended[name]
                                           for name in services & set(extended)}
    assert extended["EventStore"] == "Application[UUID]"
