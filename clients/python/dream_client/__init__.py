"""A typed Python client for the Artifact Dreaming HTTP API, with one sub-client per resource.

``from dream_client import DreamClient``; errors are in :mod:`dream_client.errors`, wire models
(generated from ``docs/openapi.json``) in :mod:`dream_client.models`.
"""

from dream_client.client import DreamClient
from dream_client.errors import ApiError

__all__ = ["ApiError", "DreamClient"]
