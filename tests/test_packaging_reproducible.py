"""Reproducible packaging: the hashed locks hold every dependency pyproject.toml declares, the
Makefile and the image install from them, the base images can be pinned by digest, and the
wheel built from this tree holds the product only (no benchmarks, devkit or tests) with the
static files its HTTP app serves."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import urllib.request
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from adapters.cli.service_commands import BENCH_NEEDS_CHECKOUT
from devkit import pin_images

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
RUNTIME_LOCK = ROOT / "requirements.lock"
DEV_LOCK = ROOT / "requirements-dev.lock"
# The platform the locks are made for (the image's): `make lock`.
LOCK_ENVIRONMENT = {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                    "python_version": "3.11", "python_full_version": "3.11.0",
                    "platform_machine": "x86_64", "implementation_name": "cpython",
                    "platform_python_implementation": "CPython", "extra": ""}
PINNED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\\n((?:\s+--hash=sha256:[0-9a-f]{64}"
                    r"(?: \\)?\n)+)", re.M)
PRODUCT = ("domain", "application", "projections", "adapters")


# -- the locks -------------------------------------------------------------------------------------

def locked(text: str) -> dict[str, str]:
    """{canonical name: version} of a lock; every entry must carry its hashes."""
    entries = {canonicalize_name(name): version for name, version, _ in PINNED.findall(text)}
    requirement_lines = [line for line in text.splitlines()
                         if line and not line.startswith((" ", "#"))]
    assert len(requirement_lines) == len(entries), "a lock entry without a hash"
    return entries


def local_distributions() -> dict[str, list[str]]:
    """{name: its dependencies} of the distributions in this repository (clients/*/), which the
    project may depend on by name; they are installed with --no-deps, never locked."""
    found = {}
    for path in sorted(ROOT.glob("clients/*/pyproject.toml")):
        project = tomllib.loads(path.read_text())["project"]
        found[canonicalize_name(project["name"])] = list(project.get("dependencies", []))
    return found


def lock_gaps(declared: list[str], lock: Mapping[str, str],
              local: Mapping[str, list[str]]) -> list[str]:
    """Each declared requirement (for Linux, Python 3.11) the lock lacks or pins outside its
    range; a local distribution stands for its own dependencies and must not be locked."""
    gaps = []
    pending = list(declared)
    while pending:
        requirement = Requirement(pending.pop())
        if requirement.marker and not requirement.marker.evaluate(LOCK_ENVIRONMENT):
            continue
        name = canonicalize_name(requirement.name)
        if name in local:
            if name in lock:
                gaps.append(f"{name} is a local distribution but locked")
            pending += local[name]
            continue
        version = lock.get(name)
        if version is None:
            gaps.append(f"{requirement} is not in the lock")
        elif not requirement.specifier.contains(version, prereleases=True):
            gaps.append(f"{requirement} but the lock has {version}")
    return gaps


def test_every_runtime_dependency_is_in_the_runtime_lock() -> None:
    declared = PYPROJECT["project"]["dependencies"]
    assert lock_gaps(declared, locked(RUNTIME_LOCK.read_text()), local_distributions()) == []


def test_every_runtime_and_dev_dependency_is_in_the_dev_lock() -> None:
    declared = [*PYPROJECT["project"]["dependencies"],
                *PYPROJECT["project"]["optional-dependencies"]["dev"]]
    assert lock_gaps(declared, locked(DEV_LOCK.read_text()), local_distributions()) == []


def test_the_lock_check_bites() -> None:
    lock = {"httpx": "0.28.1", "pydantic": "2.9.0", "uvloop": "0.21.0"}
    assert lock_gaps(["httpx>=0.27,<1", "uvloop>=0.19; sys_platform != 'win32'"], lock, {}) == []
    assert lock_gaps(["newthing>=1"], lock, {}) == ["newthing>=1 is not in the lock"]
    assert lock_gaps(["httpx>=0.29"], lock, {}) == ["httpx>=0.29 but the lock has 0.28.1"]
    assert lock_gaps(["pywin32; sys_platform == 'win32'"], lock, {}) == []  # not Linux
    client = {"artifact-dreaming-client": ["httpx>=0.27", "missing>=1"]}
    assert lock_gaps(["artifact-dreaming-client"], lock, client) == [
        "missing>=1 is not in the lock"]
    assert lock_gaps(["artifact-dreaming-client"], {**lock, "artifact-dreaming-client": "0.1"},
                     client)[0] == "artifact-dreaming-client is a local distribution but locked"
    with pytest.raises(AssertionError, match="without a hash"):
        locked("httpx==0.28.1 \\\n    --hash=sha256:" + "a" * 64 + "\nrequests==2.0\n")


def test_the_dev_lock_agrees_with_the_runtime_lock() -> None:
    runtime, dev = locked(RUNTIME_LOCK.read_text()), locked(DEV_LOCK.read_text())
    assert {name: dev.get(name) for name in runtime} == runtime


def test_make_and_the_image_install_from_the_locks() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes -r $(LOCK)" in makefile
    assert "--require-hashes -r $(DEV_LOCK)" in makefile
    assert "LOCK := requirements.lock" in makefile
    assert "DEV_LOCK := requirements-dev.lock" in makefile
    installs = [line for line in re.findall(r"\$\(BIN\)/python -m pip install (.*)", makefile)
                if "--upgrade pip" not in line]
    assert len(installs) >= 4
    # Anything that is not a lock goes in without dependencies, so nothing unhashed sneaks in.
    assert all("--require-hashes" in line or "--no-deps" in line for line in installs), installs
    assert re.search(r"^lock:", makefile, re.M)
    dockerfile = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    final = dockerfile[dockerfile.rindex("\nFROM "):]
    assert "COPY requirements.lock" in final
    pips = re.findall(r"pip install ([^&\n]*)", final)
    assert any("--require-hashes" in p and "requirements.lock" in p for p in pips), pips
    assert all("--require-hashes" in p or "--no-deps" in p for p in pips), pips
    copied = re.findall(r"^COPY (?!--from)(\S+)", dockerfile, re.M)
    assert not {"benchmarks", "devkit", "tests"} & {c.rstrip("/") for c in copied}


# -- the base images -------------------------------------------------------------------------------

class FakeRegistry:
    """Answers like Docker Hub: 401 with a Bearer challenge, a token, then the digest."""

    DIGEST = "sha256:" + "ab" * 32

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, request: urllib.request.Request) -> tuple[int, dict[str, str], bytes]:
        self.asked.append(request.full_url)
        if request.full_url.startswith("https://auth.example/token"):
            return 200, {}, b'{"token": "t0k"}'
        if request.get_header("Authorization") != "Bearer t0k":
            return 401, {"WWW-Authenticate": 'Bearer realm="https://auth.example/token",'
                                             'service="registry.docker.io"'}, b""
        return 200, {"Docker-Content-Digest": self.DIGEST}, b""


def test_the_images_are_tags_or_digests_and_pin_images_pins_them(tmp_path: Path) -> None:
    for name in ("Dockerfile", "compose.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    images = (pin_images.dockerfile_images((ROOT / "Dockerfile").read_text())
              + pin_images.compose_images((ROOT / "compose.yaml").read_text()))
    assert {image.split("@")[0] for image in images} == {"python:3.11-slim", "postgres:15"}
    # A digest in the files is a real one that `make pin-images` wrote, never a made-up form.
    assert all(re.fullmatch(r"[\w.:/-]+(@sha256:[0-9a-f]{64})?", image) for image in images)
    registry = FakeRegistry()
    digests = pin_images.pin([tmp_path / "Dockerfile", tmp_path / "compose.yaml"], registry)
    assert set(digests.values()) == {FakeRegistry.DIGEST}
    assert ("https://registry-1.docker.io/v2/library/python/manifests/3.11-slim"
            in registry.asked)
    pinned = (tmp_path / "Dockerfile").read_text()
    assert pinned.count(f"FROM python:3.11-slim@{FakeRegistry.DIGEST}") == 2
    assert "FROM python:3.11-slim AS" not in pinned
    compose = (tmp_path / "compose.yaml").read_text()
    assert f"image: postgres:15@{FakeRegistry.DIGEST}" in compose
    assert "image: artifact-dreaming:latest" in compose  # built here, not pulled


def test_pin_images_changes_nothing_without_a_registry(tmp_path: Path) -> None:
    shutil.copy(ROOT / "Dockerfile", tmp_path / "Dockerfile")

    def unreachable(request: urllib.request.Request) -> tuple[int, dict[str, str], bytes]:
        raise pin_images.RegistryError(f"{request.full_url}: no network")

    with pytest.raises(pin_images.RegistryError):
        pin_images.pin([tmp_path / "Dockerfile"], unreachable)
    assert (tmp_path / "Dockerfile").read_text() == (ROOT / "Dockerfile").read_text()


def test_references_are_read_as_docker_reads_them() -> None:
    parse = pin_images.Reference.parse
    assert parse("python:3.11-slim") == pin_images.Reference(
        "registry-1.docker.io", "library/python", "3.11-slim")
    assert parse("postgres:15@sha256:" + "0" * 64).tag == "15"
    assert parse("ghcr.io/org/app:1").registry == "ghcr.io"
    assert parse("localhost:5000/app").base_url == "http://localhost:5000"
    assert parse("org/app").repository == "org/app"


# -- the wheel -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of this tree (so no earlier build/ leaks into it), with the
    tests, benchmarks and devkit present in the copy: only the configuration keeps them out."""
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "results")
    for name in (*PRODUCT, "benchmarks", "devkit", "tests"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheels")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stderr[-4000:]
    (path,) = out.glob("artifact_dreaming-*.whl")
    return path


def test_the_wheel_holds_the_product_and_its_static_files_only(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(
        (".dist-info", ".data"))}
    assert top == set(PRODUCT)
    assert not [n for n in names if n.startswith(("benchmarks/", "tests/", "devkit/"))]
    static = {p.name for p in (ROOT / "adapters" / "http" / "static").iterdir() if p.is_file()}
    assert static
    assert {n.rsplit("/", 1)[1] for n in names if n.startswith("adapters/http/static/")} == static


def test_the_installed_wheel_runs_and_dream_bench_says_it_needs_a_checkout(
        wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "adapters.cli"]
    helped = subprocess.run([*command, "bench", "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert helped.returncode == 0, helped.stderr
    ran = subprocess.run([*command, "bench", "core", "--quick"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == BENCH_NEEDS_CHECKOUT, ran.stderr
    assert "source checkout" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_dream_bench_runs_the_benchmarks_of_the_checkout_from_anywhere(tmp_path: Path) -> None:
    dream = Path(sys.executable).parent / "dream"
    done = subprocess.run([str(dream), "bench", "core", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "usage: dream bench core" in done.stdout
