"""How the client talks to one API server: encoded paths, queries and bodies out, typed answers
or typed errors back. Every sub-client sends through one shared :class:`Connection`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol, TypeAlias, TypeVar, runtime_checkable
from urllib.parse import quote, urlencode

import httpx
from pydantic import BaseModel

from dream_client.errors import HttpError, error_from
from dream_client.models import (
    ArtifactRefBody,
    CreateDreamRun,
    LineageBody,
    MemoryCitationBody,
    ResourceBody,
    SourceRefBody,
)
from dream_client.retrying import (
    MAX_WAITS,
    conflict_pause,
    resending,
    retry_after,
    write_conflict,
)


@runtime_checkable
class HasToDict(Protocol):
    """Any value object that renders itself as a JSON object (the server's domain objects do),
    accepted by duck typing so the client never imports the server."""

    def to_dict(self) -> Mapping[str, Any]: ...


# Request values: the API's generated request model, a plain mapping, or a HasToDict object.
SourceRefLike: TypeAlias = SourceRefBody | Mapping[str, Any] | HasToDict
ArtifactRefLike: TypeAlias = ArtifactRefBody | Mapping[str, Any] | HasToDict
CitationLike: TypeAlias = MemoryCitationBody | Mapping[str, Any] | HasToDict
LineageLike: TypeAlias = LineageBody | Mapping[str, Any] | HasToDict
ResourceLike: TypeAlias = ResourceBody | Mapping[str, Any] | HasToDict
DreamRequestLike: TypeAlias = CreateDreamRun | Mapping[str, Any] | HasToDict

View = TypeVar("View", bound=BaseModel)


class Connection:
    """One API server behind one ``httpx.Client``: raises the typed error of every refusal."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def request(self, method: str, path: str, *, json: Any = None) -> Any:
        """Send one request to ``path`` (already encoded); the decoded JSON body, or raise."""
        response = self.send(method, path, json=json)
        try:
            return response.json()
        except ValueError:
            raise HttpError(f"HTTP {response.status_code} without a JSON body",
                            status=response.status_code,
                            details={"content_type": response.headers.get("content-type", ""),
                                     "body": response.text[:500]},
                            response_headers=response.headers) from None

    def send(self, method: str, path: str, *, json: Any = None,
             accept: str | None = None) -> httpx.Response:
        """Send one request; the response if successful, else raise its typed error. A
        request the server stored nothing of is sent again when it says so (see
        :mod:`dream_client.retrying`)."""
        headers = None if accept is None else {"Accept": accept}

        def exchange() -> httpx.Response:
            return self.http.request(method, path, json=json, headers=headers)

        response = self._after_waits(lambda: resending(
            exchange, lambda answer: write_conflict(answer.status_code, answer.read),
            pause=conflict_pause)[0])
        if not response.is_success:
            raise error_from(response)
        return response

    @staticmethod
    def _after_waits(send: Callable[[], httpx.Response]) -> httpx.Response:
        """``send()``, again after each 429 or 503 that names a ``Retry-After`` (bounded)."""
        response = send()
        for _ in range(MAX_WAITS):
            wait = retry_after(response.status_code, response.headers)
            if wait is None:
                break
            time.sleep(wait)
            response = send()
        return response

    def call(self, view: type[View], method: str, path: str, json: Any = None) -> View:
        """Send one request and decode its answer as the API's response model ``view``."""
        return view.model_validate(self.request(method, path, json=json))


class SubClient:
    """The routes of one resource, sent through the client's shared connection."""

    def __init__(self, api: Connection) -> None:
        self._api = api


def as_json_object(value: Any) -> dict[str, Any]:
    """A request model, mapping or ``to_dict()`` object as a JSON object."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return dict(value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return dict(to_dict())
    raise TypeError(f"expected a reference value, model or mapping, got {type(value).__name__}")


def path_segment(value: str | int, *, keep_slashes: bool = False) -> str:
    """Percent-encode one path segment (with ``keep_slashes``: a ``{name:path}`` tail)."""
    parts = str(value).split("/") if keep_slashes else [str(value)]
    # "." and ".." would be collapsed by URL normalisation: encode their dots.
    return "/".join(part.replace(".", "%2E") if part in {".", ".."} else quote(part, safe="")
                    for part in parts)


def api_path(*segments: str | int) -> str:
    return "/v1/" + "/".join(path_segment(segment) for segment in segments)


def without_none(**fields: Any) -> dict[str, Any]:
    """Fields left as ``None`` are omitted, so the server's defaults apply."""
    return {name: value for name, value in fields.items() if value is not None}


def with_query(path: str, **params: Any) -> str:
    """``path`` with the given query parameters; those left as ``None`` are omitted."""
    query = urlencode(without_none(**params))
    return path + (f"?{query}" if query else "")


def ref_list(refs: Iterable[Any]) -> list[dict[str, Any]]:
    return [as_json_object(ref) for ref in refs]


def optional_ref_list(refs: Iterable[Any] | None) -> list[dict[str, Any]] | None:
    """``None`` keeps a field's current value; an empty sequence clears it."""
    return None if refs is None else ref_list(refs)


def optional_json_object(value: Any | None) -> dict[str, Any] | None:
    return None if value is None else as_json_object(value)


def iso_text(moment: datetime | str | None) -> str | None:
    """A date-time as ISO 8601 text; text is sent as given, for the server to judge."""
    return moment.isoformat() if isinstance(moment, datetime) else moment


def optional_dict(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)
