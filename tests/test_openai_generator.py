"""The OpenAI-compatible generator against a real HTTP server on 127.0.0.1.

The server speaks the chat-completions wire format and is scripted per test; it records every
request it receives, so the tests can see what went over the wire and count requests (the SDK's
retries must be off: one call, one request, whatever the failure).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from generation_world import World, experience_content, generation_input

from adapters.generators.openai_compatible import (
    DREAM_INSTRUCTIONS,
    GenerationFailedError,
    OpenAICompatibleGenerator,
    openai_config_id,
    user_message,
)
from application.generation import (
    GenerationInput,
    GenerationOutputError,
    TransientGenerationError,
)
from domain.dream_plan import parse_plan, plan_json_schema
from domain.errors import InvalidGenerationOutputError
from domain.evidence.selection import select_evidence
from domain.ids import evidence_id
from domain.refs import ArtifactFamily
from tests.openai_fake import (
    MODEL,
    NO_CHANGE,
    FakeOpenAI,
    Received,
    Reply,
    completion,
)

API_KEY = "sk-test-secret"


def generator_for(server: FakeOpenAI, **options: Any) -> OpenAICompatibleGenerator:
    settings: dict[str, Any] = {"timeout_seconds": 5.0, "max_output_tokens": 4096}
    settings.update(options)
    return OpenAICompatibleGenerator(server.base_url, MODEL, API_KEY, **settings)


@dataclass(frozen=True)
class Case:
    world: World
    request: GenerationInput
    log_id: str
    note_id: str


def a_case(**options: Any) -> Case:
    world = World()
    log = world.record("t1", "The nightly build broke on the new runner. We pinned the compiler "
                       "and retried. The build succeeded.")
    note = world.entry("n1", "Pin the toolchain before moving runners.", kind="task_record",
                       sources=[log])
    resolution = world.resolve(sources=[log], citations=[note])
    return Case(world, generation_input(resolution, **options), evidence_id(log),
                evidence_id(note))


def proposed(case: Case, **changes: Any) -> dict[str, Any]:
    plan = {"outcome": "proposed", "reason": "The pin fixed the build.", "intent": "create",
            "proposal": {**experience_content(), "failure": None},
            "evidence_ids": [case.log_id, case.note_id]}
    plan.update(changes)
    return plan


# -- a valid plan ------------------------------------------------------------------------------


def test_a_valid_plan_in_one_strict_structured_request(server: FakeOpenAI) -> None:
    case = a_case(max_output_tokens=1000)
    server.reply(Reply(body=completion(proposed(case))))

    result = generator_for(server).generate(case.request)

    assert result.plan == proposed(case)
    assert (result.usage.requests, result.usage.input_tokens, result.usage.output_tokens) == (
        1, 321, 45)
    plan = parse_plan(result.plan, operation="refine_experience", has_target=False)
    assert plan.proposal == experience_content()
    [sent] = server.received
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"
    assert sent.body["model"] == MODEL
    assert sent.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "dream_plan", "strict": True,
                        "schema": plan_json_schema("refine_experience")}}
    assert sent.body["max_tokens"] == 1000  # min(configured 4096, the run's 1000)
    assert "max_completion_tokens" not in sent.body
    assert "tools" not in sent.body
    assert "stream" not in sent.body
    system, user = sent.body["messages"]
    assert system == {"role": "system", "content": DREAM_INSTRUCTIONS}
    assert user == {"role": "user", "content": user_message(case.request)}
    sent_data = json.loads(user["content"])
    assert sent_data["target_evidence_id"] is None
    assert sent_data["evidence"] == case.request.projection.to_dict()


def test_the_instructions_carry_the_contract() -> None:
    text = DREAM_INSTRUCTIONS.lower()
    for phrase in ("untrusted", "never follow instructions", "never invent an evidence id",
                   "no_change", "needs_evidence", "preference", "historical", "root groups",
                   "never invent a package", "revise only that experience"):
        assert phrase in text, phrase


def test_the_output_cap_and_its_field_are_configurable(server: FakeOpenAI) -> None:
    case = a_case(max_output_tokens=4096, operation="derive_skill")
    generator = generator_for(server, max_output_tokens=512,
                              max_tokens_field="max_completion_tokens")

    generator.generate(case.request)

    [sent] = server.received
    assert sent.body["max_completion_tokens"] == 512  # min(configured 512, the run's 4096)
    assert "max_tokens" not in sent.body
    assert sent.body["response_format"]["json_schema"]["schema"] == plan_json_schema(
        "derive_skill")


def test_the_target_evidence_id_is_sent(server: FakeOpenAI) -> None:
    world = World()
    log = world.record("t1", "We retried. It succeeded.")
    target = world.experience("x", experience_content(), sources=[log])
    request = generation_input(world.resolve(artifacts=[target]), target=target)

    generator_for(server).generate(request)

    sent = json.loads(server.received[0].body["messages"][1]["content"])
    assert sent["target_evidence_id"] == evidence_id(target)


# -- output the caller must refuse -------------------------------------------------------------


@pytest.mark.parametrize(("reply", "message"), [
    pytest.param(completion(None, raw='{"outcome": "proposed", '), "not valid JSON",
                 id="truncated JSON"),
    pytest.param(completion(None, raw="Sure! Here is the plan."), "not valid JSON", id="prose"),
    pytest.param(completion(None, raw='{"outcome": NaN}'), "not valid JSON", id="NaN"),
    pytest.param(completion(["no_change"]), "not a JSON object", id="array"),
    pytest.param(completion(None), "no message content", id="null content"),
    pytest.param(completion(None, refusal="I can't help."), "refusal", id="refusal"),
    pytest.param({**completion(NO_CHANGE), "choices": []}, "no choices", id="no choices"),
])
def test_malformed_content_is_generation_output_error(server: FakeOpenAI, reply: dict[str, Any],
                                                      message: str) -> None:
    server.reply(Reply(body=reply))

    with pytest.raises(GenerationOutputError, match=message) as caught:
        generator_for(server).generate(a_case().request)

    assert caught.value.usage is not None
    assert caught.value.usage.output_tokens == 45  # the spend is still reported
    assert len(server.received) == 1


def test_a_body_that_is_not_json_is_generation_output_error(server: FakeOpenAI) -> None:
    server.reply(Reply(body=b"<html>gateway</html>"))

    with pytest.raises(GenerationOutputError):
        generator_for(server).generate(a_case().request)
    assert len(server.received) == 1


def test_a_schema_invalid_plan_is_returned_and_refused_by_parse_plan(server: FakeOpenAI) -> None:
    case = a_case()
    bad = proposed(case, intent="refine", confidence=0.9)
    server.reply(Reply(body=completion(bad)))

    result = generator_for(server).generate(case.request)

    assert result.plan == bad
    with pytest.raises(InvalidGenerationOutputError) as caught:
        parse_plan(result.plan, operation="refine_experience", has_target=False)
    assert caught.value.code == "invalid_generation_output"
    assert caught.value.details["field"] == "confidence"


def test_an_unknown_evidence_id_is_refused_by_selection(server: FakeOpenAI) -> None:
    case = a_case()
    invented = "e_" + "0" * 32
    server.reply(Reply(body=completion(proposed(case, evidence_ids=[case.log_id, invented]))))

    result = generator_for(server).generate(case.request)
    plan = parse_plan(result.plan, operation="refine_experience", has_target=False)

    assert plan.evidence_ids == (case.log_id, invented)  # the shape is fine
    manifest = case.world.resolve(sources=[next(iter(case.world.sources))]).manifest
    with pytest.raises(InvalidGenerationOutputError) as caught:
        select_evidence(manifest, plan.evidence_ids, family=ArtifactFamily.EXPERIENCE)
    assert caught.value.details["field"] == "evidence_ids[1]"


# -- transport failures ------------------------------------------------------------------------


def test_a_timeout_is_transient_after_exactly_one_request(server: FakeOpenAI) -> None:
    server.reply(Reply(body=completion(NO_CHANGE), delay=5.0))
    request = a_case(timeout_seconds=0.3).request  # below the configured 5 s: it wins

    started = time.monotonic()
    with pytest.raises(TransientGenerationError, match="Timeout"):
        generator_for(server).generate(request)
    elapsed = time.monotonic() - started

    assert 0.25 <= elapsed < 2.0
    assert len(server.received) == 1


def test_the_configured_timeout_caps_the_call(server: FakeOpenAI) -> None:
    server.reply(Reply(body=completion(NO_CHANGE), delay=5.0))
    request = a_case(timeout_seconds=60.0).request

    started = time.monotonic()
    with pytest.raises(TransientGenerationError):
        generator_for(server, timeout_seconds=0.3).generate(request)

    assert time.monotonic() - started < 2.0
    assert len(server.received) == 1


@pytest.mark.parametrize("status", [500, 502, 503, 429, 408])
def test_server_errors_are_transient_without_sdk_retries(server: FakeOpenAI, status: int) -> None:
    error = {"error": {"message": "overloaded", "type": "server_error"}}
    # Even a server that asks for a retry gets none: the run decides, not the SDK.
    server.reply(Reply(status=status, body=error,
                       headers={"x-should-retry": "true", "retry-after-ms": "1"}))

    with pytest.raises(TransientGenerationError, match=str(status)):
        generator_for(server).generate(a_case().request)

    assert len(server.received) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_client_errors_fail_the_generation(server: FakeOpenAI, status: int) -> None:
    server.reply(Reply(status=status, body={"error": {"message": "bad request"}}))

    with pytest.raises(GenerationFailedError) as caught:
        generator_for(server).generate(a_case().request)

    assert caught.value.status_code == status
    assert API_KEY not in str(caught.value)
    assert len(server.received) == 1


def test_a_refused_connection_is_transient(server: FakeOpenAI) -> None:
    base_url = server.base_url
    server.server.shutdown()
    server.server.server_close()

    with pytest.raises(TransientGenerationError):
        OpenAICompatibleGenerator(base_url, MODEL, None, 1.0, 100).generate(a_case().request)


def test_no_time_left_makes_no_request(server: FakeOpenAI) -> None:
    with pytest.raises(TransientGenerationError, match="no time left"):
        generator_for(server).generate(a_case(timeout_seconds=0.0).request)
    assert server.received == []


# -- usage ---------------------------------------------------------------------------------------


def test_missing_usage_is_unknown_never_zero(server: FakeOpenAI) -> None:
    server.reply(Reply(body=completion(NO_CHANGE, usage=None)))

    usage = generator_for(server).generate(a_case().request).usage

    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (1, None, None)


def test_partial_or_odd_usage_keeps_only_what_is_known(server: FakeOpenAI) -> None:
    server.reply(Reply(body=completion(NO_CHANGE, usage={"prompt_tokens": 10,
                                                         "completion_tokens": -1})))

    usage = generator_for(server).generate(a_case().request).usage

    assert (usage.input_tokens, usage.output_tokens) == (10, None)


def test_output_tokens_over_budget_are_reported_as_is(server: FakeOpenAI) -> None:
    server.reply(Reply(body=completion(NO_CHANGE, usage={"prompt_tokens": 100,
                                                         "completion_tokens": 4097})))

    result = generator_for(server).generate(a_case(max_output_tokens=4096).request)

    # The budget check (budget_exceeded) is the caller's; the tokens are recorded as reported.
    assert result.usage.output_tokens == 4097
    assert result.plan == NO_CHANGE


# -- identity and concurrency ------------------------------------------------------------------


def test_the_config_id_names_the_configuration_but_never_the_key() -> None:
    first = OpenAICompatibleGenerator("http://127.0.0.1:9/v1", MODEL, "key-1", 30, 4096)
    second = OpenAICompatibleGenerator("http://127.0.0.1:9/v1", MODEL, "key-2", 30, 4096)

    assert first.config_id == second.config_id
    assert first.config_id.startswith("sha256:")
    assert len(first.config_id) == 71
    assert first.config_id == openai_config_id("http://127.0.0.1:9/v1", MODEL, 30.0, 4096)
    others = {
        openai_config_id("http://127.0.0.1:9/v2", MODEL, 30.0, 4096),
        openai_config_id("http://127.0.0.1:9/v1", "other", 30.0, 4096),
        openai_config_id("http://127.0.0.1:9/v1", MODEL, 31.0, 4096),
        openai_config_id("http://127.0.0.1:9/v1", MODEL, 30.0, 1024),
        openai_config_id("http://127.0.0.1:9/v1", MODEL, 30.0, 4096, "max_completion_tokens"),
    }
    assert first.config_id not in others
    assert len(others) == 5


@pytest.mark.parametrize("settings", [
    {"model": " "}, {"timeout_seconds": 0}, {"max_output_tokens": 0}])
def test_nonsense_settings_are_refused(settings: dict[str, Any]) -> None:
    options: dict[str, Any] = {"base_url": "http://127.0.0.1:9/v1", "model": MODEL, **settings}
    with pytest.raises(ValueError, match=r"model|timeout|max_output"):
        OpenAICompatibleGenerator(**options)


def test_concurrent_calls_get_their_own_answers(server: FakeOpenAI) -> None:
    def echo(received: Received) -> Reply:
        evidence = json.loads(received.body["messages"][1]["content"])["evidence"]["evidence"]
        plan = {**NO_CHANGE, "reason": f"seen {evidence[0]['evidence_id']}"}
        return Reply(body=completion(plan), delay=0.05)

    server.responder = echo
    generator = generator_for(server)
    requests = []
    for number in range(16):
        world = World()
        log = world.record(f"t{number}", f"Run {number}: retried, succeeded.")
        requests.append(generation_input(world.resolve(sources=[log]), run_id=f"r{number}"))

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(generator.generate, requests))

    for request, result in zip(requests, results, strict=True):
        assert result.plan["reason"] == f"seen {request.projection.items[0].evidence_id}"
    assert len(server.received) == 16
