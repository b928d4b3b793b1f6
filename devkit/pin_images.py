"""Pin the base images of the Dockerfile and compose.yaml by digest: ``make pin-images``.

Every ``FROM`` image of a Dockerfile, and every ``image:`` of a compose service that is not
built here, is looked up in its registry (Docker Registry HTTP API v2, anonymous pull token)
and rewritten as ``name:tag@sha256:…``: the tag stays for the reader, the digest decides what
is pulled. An image already pinned is looked up again by its tag, so a rerun moves the pins to
what the tags name today. Without a registry to ask the command fails and changes nothing.

    python -m devkit.pin_images Dockerfile compose.yaml
"""

from __future__ import annotations

import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

DOCKER_HUB = "registry-1.docker.io"
MANIFESTS = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
FROM_LINE = re.compile(r"^(FROM\s+(?:--platform=\S+\s+)?)(\S+)", re.M | re.I)
TIMEOUT_S = 30


class RegistryError(RuntimeError):
    """The registry could not be reached or did not name a digest."""


@dataclass(frozen=True)
class Reference:
    """``[registry/]repository[:tag][@digest]``, as docker reads it."""

    registry: str
    repository: str
    tag: str

    @classmethod
    def parse(cls, text: str) -> Reference:
        name = text.split("@", 1)[0]
        first, _, rest = name.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            registry, path = first, rest
        else:
            registry, path = DOCKER_HUB, name
        if registry == DOCKER_HUB and "/" not in path:
            path = f"library/{path}"
        repository, _, tag = path.partition(":")
        return cls(registry, repository, tag or "latest")

    @property
    def base_url(self) -> str:
        host = self.registry.split(":")[0]
        scheme = "http" if host in ("localhost", "127.0.0.1") else "https"
        return f"{scheme}://{self.registry}"


Fetch = Callable[[urllib.request.Request], tuple[int, dict[str, str], bytes]]


def fetch(request: urllib.request.Request) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request; an HTTP error status is an answer too."""
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            return answer.status, dict(answer.headers.items()), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers.items()), error.read()
    except (urllib.error.URLError, OSError) as error:
        msg = f"{request.full_url}: {error}"
        raise RegistryError(msg) from error


def _token(reference: Reference, challenge: str, get: Fetch) -> str:
    """An anonymous pull token, asked where the registry's Bearer challenge says."""
    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    if not challenge.lower().startswith("bearer") or "realm" not in fields:
        msg = f"{reference.registry} asks for an authentication this tool does not do"
        raise RegistryError(msg)
    query = {"scope": f"repository:{reference.repository}:pull"}
    if "service" in fields:
        query["service"] = fields["service"]
    url = f"{fields['realm']}?{urllib.parse.urlencode(query)}"
    status, _, body = get(urllib.request.Request(url))
    if status != 200:
        msg = f"{url}: HTTP {status}"
        raise RegistryError(msg)
    answer = json.loads(body)
    token = answer.get("token") or answer.get("access_token")
    if not isinstance(token, str):
        msg = f"{url} gave no token"
        raise RegistryError(msg)
    return token


def resolve(reference: Reference, get: Fetch = fetch) -> str:
    """The digest the registry gives for the reference's tag (a multi-platform index's own)."""
    url = f"{reference.base_url}/v2/{reference.repository}/manifests/{reference.tag}"
    headers = {"Accept": MANIFESTS}
    status, answer, _ = get(urllib.request.Request(url, headers=headers, method="HEAD"))
    if status == 401:
        challenge = next((v for k, v in answer.items() if k.lower() == "www-authenticate"), "")
        headers["Authorization"] = f"Bearer {_token(reference, challenge, get)}"
        status, answer, _ = get(urllib.request.Request(url, headers=headers, method="HEAD"))
    digest = next((v for k, v in answer.items() if k.lower() == "docker-content-digest"), "")
    if status != 200 or not DIGEST.fullmatch(digest):
        msg = f"{url}: HTTP {status}, digest {digest!r}"
        raise RegistryError(msg)
    return digest


def pinned(image: str, digest: str) -> str:
    return f"{image.split('@', 1)[0]}@{digest}"


def dockerfile_images(text: str) -> list[str]:
    """The FROM images, less the stages built earlier in the same file."""
    stages = {m.lower() for m in re.findall(r"^FROM\s.*\bAS\s+(\S+)", text, re.M | re.I)}
    return [image for _, image in FROM_LINE.findall(text) if image.lower() not in stages]


def compose_images(text: str) -> list[str]:
    """The images of the services that are pulled, not built here."""
    services = (yaml.safe_load(text) or {}).get("services", {})
    return [s["image"] for s in services.values() if "image" in s and "build" not in s]


def rewrite(text: str, images: Iterable[str], digests: dict[str, str], line: str) -> str:
    """Each image on a line of the given kind (``FROM`` or ``image:``), pinned."""
    for image in images:
        pattern = re.compile(rf"^({line}){re.escape(image)}(?=\s|$)", re.M | re.I)
        text = pattern.sub(rf"\g<1>{pinned(image, digests[image])}", text)
    return text


def pin(paths: Sequence[Path], get: Fetch = fetch) -> dict[str, str]:
    """Pin every image of the files in place; {image as it was: digest}. All or nothing."""
    found = {path: (dockerfile_images(path.read_text()) if path.suffix not in (".yaml", ".yml")
                    else compose_images(path.read_text())) for path in paths}
    digests = {image: resolve(Reference.parse(image), get)
               for images in found.values() for image in images}
    for path, images in found.items():
        line = r"[ \t]*image:[ \t]*" if path.suffix in (".yaml", ".yml") else (
            r"FROM\s+(?:--platform=\S+\s+)?")
        path.write_text(rewrite(path.read_text(), images, digests, line))
    return digests


def main(argv: Sequence[str] | None = None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    if not paths:
        print("usage: python -m devkit.pin_images FILE...", file=sys.stderr)
        return 2
    try:
        digests = pin(paths)
    except RegistryError as error:
        print(f"pin-images: no digest, nothing changed: {error}", file=sys.stderr)
        return 1
    for image, digest in digests.items():
        print(f"{pinned(image, digest)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
