"""Deployment settings: ``DREAM_*`` environment variables (pydantic-settings)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    # Environment variables win over the optional file (``DREAM_SETTINGS_FILE``, default
    # ``dream.env`` in the working directory), which wins over the defaults.
    model_config = SettingsConfigDict(
        env_prefix="DREAM_", extra="ignore",
        env_file=os.environ.get("DREAM_SETTINGS_FILE", "dream.env"), env_file_encoding="utf-8")

    access: Literal["enforced", "disabled"] = Field(
        default="enforced",
        description="enforced: bearer tokens and roles; disabled: one local principal.",
    )
    data_dir: Path = Field(default=Path(".dream"),
                           description="Embedded store directory (SQLite files).")
    database_url: str | None = Field(
        default=None, description="A postgresql:// URL switches the store to PostgreSQL."
    )
    url: str = Field(default="http://127.0.0.1:8787",
                     description="API base URL for the client commands (run, show, list).")
    token: str | None = Field(
        default=None, description="Bearer token for the client commands; default: the "
        "bootstrap token in <data dir>/admin-token when readable.")
    workers: int = Field(default=2, ge=0, le=64, description=(
        "Generation threads of this process: Dream runs it executes at once, within the "
        "deployment-wide DREAM_MAX_CONCURRENT_GENERATIONS, in `dream serve` (0: none, leave "
        "them to `dream worker`) or `dream worker`."))
    max_concurrent_generations: int = Field(default=4, ge=1, le=256, description=(
        "Deployment-wide cap on model calls in flight: Dream runs executing at once across "
        "every `dream serve` and `dream worker` process of this store (leased slots in the "
        "store; a crashed process's slot comes back after DREAM_LEASE_SECONDS). At least 1: "
        "there is no unlimited setting."))
    auto_max_concurrent: int = Field(default=4, ge=1, le=256, description=(
        "Deployment-wide cap on automatic Dream runs generating at once (leased slots, like "
        "DREAM_MAX_CONCURRENT_GENERATIONS, which they count against too); the scheduler also "
        "keeps at most this many automatic runs unfinished. At least 1."))
    lease_seconds: float = Field(default=60.0, ge=2.0, le=600.0, description=(
        "How long a claimed attempt is held; a crashed worker's run is recovered after it. "
        "A live attempt renews it every third of it while its model call is in flight."))
    read_wait_seconds: float = Field(default=2.0, ge=0.0, le=60.0, description=(
        "How long a read-model read waits for its view to reach the store's head as of the "
        "request's arrival (read-your-writes); past it: 503 read_model_behind."))
    host_views: bool = Field(default=True, description=(
        "Compete to host the read models (one elected host per view across all processes); "
        "false: this API process only follows views hosted by others."))
    view_failover_seconds: float = Field(default=5.0, gt=0.0, le=600.0, description=(
        "How soon a process takes over a read model whose host went away: it tries for the "
        "view's lock every fifth of this."))
    sqlite_lock_timeout: int = Field(default=10, ge=1,
                                     description="Seconds a writer waits for the SQLite lock.")
    postgres_pool_size: int = Field(default=5, ge=1, le=100, description=(
        "Connections the commands' PostgreSQL pool keeps open (up to 10 more while busy); "
        "each view's pools keep 1 and grow to this size while busy."))
    postgres_lock_timeout: int = Field(default=10, ge=0,
                                       description="Seconds a writer waits for the insert lock.")
    store_timeout_seconds: int = Field(default=2, ge=1, le=60, description=(
        "How long a command waits for a PostgreSQL connection (and a new connection for the "
        "server) before answering 503 store_unavailable: an outage fails fast, never hangs. "
        "One-shot commands that open the store (dream admin, audit replay, export, import, ...) "
        "wait up to 30 s unless this is set, once the database has answered."))
    generator: Literal["offline", "openai"] = Field(
        default="offline",
        description="offline: the deterministic embedded generator; openai: an "
        "OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, llama.cpp, ...).")
    openai_base_url: str = Field(default="https://api.openai.com/v1",
                                 description="Base URL of the OpenAI-compatible endpoint.")
    openai_model: str | None = Field(default=None,
                                     description="Model name; required when generator=openai.")
    openai_api_key: SecretStr | None = Field(
        default=None, description="API key for the endpoint; never part of the config id.")
    openai_timeout_seconds: float = Field(
        default=30.0, gt=0, le=600,
        description="Per-call timeout; a call uses min(this, the run's remaining budget).")
    openai_max_output_tokens: int = Field(
        default=4096, ge=1, description="Per-call output cap; a call uses min(this, budget).")
    openai_max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = Field(
        default="max_tokens", description="Request field that carries the output cap "
        "(max_completion_tokens for OpenAI reasoning models).")

    review_page: bool = Field(default=False, description=(
        "Serve the web review page at /review (static; it calls the API with a pasted token)."))
    ops_page: bool = Field(default=False, description=(
        "Serve the operations page at /ops (static; it polls /v1/ops/overview with a pasted "
        "deployment administrator's token)."))
    mcp_stateless: bool = Field(default=False, description=(
        "Answer each MCP request at /mcp on its own, without sessions: needed when several "
        "processes share the port (`dream serve --processes N` sets it for them). Resource "
        "list-changed notifications need a session, so none are sent."))
    mcp_review: bool = Field(default=False, description=(
        "Offer the review decisions (approve_candidate, reject_candidate) as MCP tools, to "
        "principals that may review in the session's scope; off: agents cannot decide."))
    log_format: Literal["text", "json"] = Field(default="text", description=(
        "text: lines for a person at a terminal; json: one object a line (time, level, role, "
        "pid, logger, request_id, scope, run_id, message) for a log pipeline."))
    metrics: bool = Field(default=True, description=(
        "Count and time requests, runs, model calls and commits for /metrics; false leaves "
        "only the gauges read at each scrape (for an A/B of their cost)."))
    metrics_dir: Path | None = Field(default=None, description=(
        "Where the processes of one host share their metric values, so one scrape of "
        "/metrics counts them all (serve, its --processes, workers, projection hosts). "
        "Default: <DREAM_DATA_DIR>/metrics."))

    @property
    def uses_postgres(self) -> bool:
        return bool(self.database_url)
