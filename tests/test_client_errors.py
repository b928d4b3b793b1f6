"""The client has its own exception class for every stable error code the server answers.

The client cannot import the domain, so its classes are written out; this test (which may
import the server) keeps the two lists from drifting apart.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

import adapters.http.errors as http_errors
import adapters.store.backup
import adapters.store.bundles
import adapters.store.local_disk
import adapters.store.migration  # noqa: F401 - every module declaring codes, imported
from adapters.api import problems
from adapters.api.problems import STATUS_BY_CODE
from domain.errors import DomainError
from dream_client.errors import ERRORS_BY_CODE, ApiError, error_class, error_from

PRODUCT = {"domain", "application", "projections", "adapters"}


def _domain_codes() -> set[str]:
    """Every code a DomainError subclass of the product declares itself (the suite's own
    helpers may declare codes for their scenarios: those are not the server's)."""
    codes: set[str] = set()
    pending: list[type[DomainError]] = [DomainError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if "code" in vars(cls) and cls.__module__.split(".")[0] in PRODUCT:
            codes.add(cls.code)
    return codes


def _http_codes() -> set[str]:
    """The codes mapped to a status, and those the API and REST answer themselves
    (``Problem(status, "code"`` or ``error_response(status, "code"``)."""
    answered: set[str] = set()
    for module in (problems, http_errors):
        source = Path(module.__file__ or "").read_text(encoding="utf-8")
        found = re.findall(r'(?:Problem|error_response)\(\s*[\w.]+\s*,\s*"([a-z_]+)"',
                           source)
        assert found, f"the pattern finds no code in {module.__name__}: update this test"
        answered |= set(found)
    return set(STATUS_BY_CODE) | answered


SERVED_CODES = sorted(_domain_codes() | _http_codes())


@pytest.mark.parametrize("code", SERVED_CODES)
def test_every_served_code_has_its_own_exception_class(code: str) -> None:
    cls = error_class(code)
    assert cls is not ApiError
    assert cls.code == code
    assert [other for other, known in ERRORS_BY_CODE.items() if known is cls] == [code]
    error = cls("refused", status=409, code=code)
    assert (error.status, error.code, error.details, error.retry_after) == (409, code, {}, None)


def test_an_unknown_code_raises_the_base_class_with_its_envelope() -> None:
    response = httpx.Response(418, headers={"Retry-After": "3"}, json={"error": {
        "code": "brand_new", "message": "later", "details": {"why": "tea"}}})
    error = error_from(response)
    assert type(error) is ApiError
    assert (error.status, error.code, error.message, error.details, error.retry_after) == (
        418, "brand_new", "later", {"why": "tea"}, 3.0)

