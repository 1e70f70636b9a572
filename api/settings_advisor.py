"""The settings that govern the App Advisor (SPACEDOCK_ADVISOR_*): one part of
api.settings.Settings, which builds core.advisor.settings.AdvisorSettings from them."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, SecretStr, field_validator, model_validator

from api.settings_values import address, setting
from core.advisor.settings import AdvisorSettings, ModelSettings


class AdvisorVariables(BaseModel):
    """The App Advisor (issue 24; core.advisor.settings, built by `advisor`)."""

    advisor_interval_s: float = setting(300.0, "SPACEDOCK_ADVISOR_INTERVAL_S", 0)
    advisor_concurrency: int = setting(4, "SPACEDOCK_ADVISOR_CONCURRENCY", 0)
    advisor_read_timeout_s: float = setting(60.0, "SPACEDOCK_ADVISOR_READ_TIMEOUT_S", 0)
    advisor_max_objects: int = setting(10_000, "SPACEDOCK_ADVISOR_MAX_OBJECTS", 0)
    advisor_model_url: str | None = setting(None, "SPACEDOCK_ADVISOR_MODEL_URL")
    advisor_model: str | None = setting(None, "SPACEDOCK_ADVISOR_MODEL")
    # Never logged or shown (SecretStr prints as stars).
    advisor_model_api_key: SecretStr | None = setting(None, "SPACEDOCK_ADVISOR_MODEL_API_KEY")
    advisor_model_concurrency: int = setting(2, "SPACEDOCK_ADVISOR_MODEL_CONCURRENCY", 0)
    advisor_model_timeout_s: float = setting(30.0, "SPACEDOCK_ADVISOR_MODEL_TIMEOUT_S", 0)
    advisor_model_calls_per_hour: int = setting(120, "SPACEDOCK_ADVISOR_MODEL_CALLS_PER_HOUR", 0)

    @field_validator("advisor_model_url")
    @classmethod
    def _model_url(cls, url: str | None) -> str | None:
        # The base of an OpenAI-compatible API: /chat/completions is added to it.
        return address(url, ("http", "https"))

    @model_validator(mode="after")
    def _model_named(self) -> Self:
        if self.advisor_model_url is not None and not self.advisor_model:
            raise ValueError(
                "SPACEDOCK_ADVISOR_MODEL must be set with SPACEDOCK_ADVISOR_MODEL_URL: the model "
                "the endpoint serves (e.g. gpt-4o-mini, llama3.1)"
            )
        return self

    @property
    def advisor(self) -> AdvisorSettings:
        model = None
        if self.advisor_model_url is not None and self.advisor_model:
            key = self.advisor_model_api_key
            model = ModelSettings(
                url=self.advisor_model_url,
                model=self.advisor_model,
                api_key="" if key is None else key.get_secret_value(),
                concurrency=self.advisor_model_concurrency,
                timeout_s=self.advisor_model_timeout_s,
                calls_per_hour=self.advisor_model_calls_per_hour,
            )
        return AdvisorSettings(
            interval_s=self.advisor_interval_s,
            concurrency=self.advisor_concurrency,
            read_timeout_s=self.advisor_read_timeout_s,
            max_objects=self.advisor_max_objects,
            model=model,
        )
