"""Choosing the generator from ``DREAM_*`` settings, and the registry runs pin configurations in."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from adapters.generators.factory import GeneratorRegistry, generator_from, registry_from
from adapters.generators.offline import OFFLINE_CONFIG_ID, OfflineGenerator
from adapters.generators.openai_compatible import OpenAICompatibleGenerator, openai_config_id
from adapters.settings import Settings
from domain.errors import CapabilityUnavailableError, InvalidSettingsError


def test_the_default_is_the_offline_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DREAM_GENERATOR", raising=False)

    generator = generator_from(Settings())

    assert isinstance(generator, OfflineGenerator)
    assert generator.config_id == OFFLINE_CONFIG_ID


def test_openai_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAM_GENERATOR", "openai")
    monkeypatch.setenv("DREAM_OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("DREAM_OPENAI_MODEL", "qwen2.5:7b")
    monkeypatch.setenv("DREAM_OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("DREAM_OPENAI_TIMEOUT_SECONDS", "12.5")

    settings = Settings()
    generator = generator_from(settings)

    assert isinstance(generator, OpenAICompatibleGenerator)
    assert generator.config_id == openai_config_id("http://127.0.0.1:11434/v1", "qwen2.5:7b",
                                                   12.5, 4096)
    assert "sk-secret" not in repr(settings)  # the key is a secret


def test_openai_needs_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAM_GENERATOR", "openai")
    monkeypatch.delenv("DREAM_OPENAI_MODEL", raising=False)

    with pytest.raises(InvalidSettingsError) as caught:
        generator_from(Settings())
    assert caught.value.details["field"] == "openai_model"


def test_a_run_keeps_its_pinned_configuration_while_it_is_registered() -> None:
    offline = OfflineGenerator()
    registry = GeneratorRegistry(offline)
    pinned = registry.current.config_id  # a run's first attempt pins this

    remote = OpenAICompatibleGenerator("http://127.0.0.1:9/v1", "m", None, 30, 4096)
    assert registry.register(remote, make_current=True) == remote.config_id

    assert registry.current is remote  # new runs pin the new configuration
    assert registry.get(pinned) is offline  # the in-flight run continues on its own
    assert pinned in registry
    assert remote.config_id in registry
    assert list(registry) == sorted([pinned, remote.config_id])
    assert len(registry) == 2

    registry.unregister(pinned)
    assert pinned not in registry
    with pytest.raises(CapabilityUnavailableError) as caught:
        registry.get(pinned)
    assert caught.value.code == "capability_unavailable"
    assert caught.value.details["model_config_id"] == pinned


def test_the_current_configuration_cannot_be_unregistered() -> None:
    registry = GeneratorRegistry(OfflineGenerator())
    with pytest.raises(ValueError, match="current"):
        registry.unregister(OFFLINE_CONFIG_ID)
    registry.unregister("sha256:unknown")  # retiring an absent configuration is a no-op


def test_registry_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DREAM_GENERATOR", raising=False)
    registry = registry_from(Settings())
    assert registry.current.config_id == OFFLINE_CONFIG_ID
    assert OFFLINE_CONFIG_ID in registry


def test_a_process_with_the_offline_generator_never_imports_the_openai_package() -> None:
    """The package takes about half a second to import: every worker and CLI start paid it."""
    probe = ("import sys; import adapters.cli.main, adapters.workers.pool; "
             "from adapters.generators.factory import generator_from; "
             "from adapters.settings import Settings; "
             "generator_from(Settings(generator='offline')); "
             "print('openai' in sys.modules)")
    answer = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, env={**os.environ, "DREAM_GENERATOR": "offline"})
    assert answer.stdout.strip() == "False"
