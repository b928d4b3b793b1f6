"""Building the configured generator, and the registry of model configurations by id.

A run pins the ``config_id`` of the current generator at its first attempt and continues on
that configuration while it is registered (docs/contract.md#generator-contract); a new
configuration becomes current
for new runs without taking the old one away from runs in flight.
"""

from __future__ import annotations

from collections.abc import Iterator
from threading import Lock

from adapters.generators.offline import OfflineGenerator
from adapters.settings import Settings
from application.generation import Generator
from domain.errors import CapabilityUnavailableError, InvalidSettingsError


def generator_from(settings: Settings) -> Generator:
    """The generator ``DREAM_GENERATOR`` names, configured from the ``DREAM_OPENAI_*`` settings."""
    if settings.generator == "offline":
        return OfflineGenerator()
    if not settings.openai_model or not settings.openai_model.strip():
        raise InvalidSettingsError("DREAM_OPENAI_MODEL is required when DREAM_GENERATOR=openai",
                                   field="openai_model")
    # Imported only here: the ``openai`` package takes about half a second to import, which
    # every process start (a worker's, the CLI's) paid even with the offline generator.
    from adapters.generators.openai_compatible import OpenAICompatibleGenerator  # noqa: PLC0415

    key = settings.openai_api_key
    return OpenAICompatibleGenerator(
        base_url=settings.openai_base_url,
        model=settings.openai_model,
        api_key=None if key is None else key.get_secret_value(),
        timeout_seconds=settings.openai_timeout_seconds,
        max_output_tokens=settings.openai_max_output_tokens,
        max_tokens_field=settings.openai_max_tokens_field,
    )


class GeneratorRegistry:
    """Generators by ``config_id``, and the current one new runs pin. Thread-safe."""

    def __init__(self, current: Generator) -> None:
        self._lock = Lock()
        self._generators: dict[str, Generator] = {current.config_id: current}
        self._current_id = current.config_id

    @property
    def current(self) -> Generator:
        """The generator a run pins at its first attempt."""
        with self._lock:
            return self._generators[self._current_id]

    def register(self, generator: Generator, *, make_current: bool = False) -> str:
        """Add (or replace) the generator under its config id; return that id."""
        config_id = generator.config_id
        with self._lock:
            self._generators[config_id] = generator
            if make_current:
                self._current_id = config_id
        return config_id

    def unregister(self, config_id: str) -> None:
        """Retire a configuration; runs pinned to it then fail ``capability_unavailable``."""
        with self._lock:
            if config_id == self._current_id:
                raise ValueError("the current configuration cannot be unregistered")
            self._generators.pop(config_id, None)

    def get(self, config_id: str) -> Generator:
        """The pinned configuration, or ``capability_unavailable`` when it is gone."""
        with self._lock:
            generator = self._generators.get(config_id)
        if generator is None:
            raise CapabilityUnavailableError(
                "the run's model configuration is no longer available",
                field="model_config_id", model_config_id=config_id)
        return generator

    def __contains__(self, config_id: object) -> bool:
        with self._lock:
            return config_id in self._generators

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(sorted(self._generators))

    def __len__(self) -> int:
        with self._lock:
            return len(self._generators)


def registry_from(settings: Settings) -> GeneratorRegistry:
    """A registry whose current (and only) configuration is the configured generator."""
    return GeneratorRegistry(generator_from(settings))
