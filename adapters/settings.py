"""Deployment settings: ``DREAM_*`` environment variables (pydantic-settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DREAM_", extra="ignore")

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
    sqlite_lock_timeout: int = Field(default=10, ge=1,
                                     description="Seconds a writer waits for the SQLite lock.")
    postgres_pool_size: int = Field(default=5, ge=1, le=100)
    postgres_lock_timeout: int = Field(default=10, ge=0,
                                       description="Seconds a writer waits for the insert lock.")

    @property
    def uses_postgres(self) -> bool:
        return bool(self.database_url)
