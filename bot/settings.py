"""Configuration: environment (prefix ROOST_, `__` for nesting) over `roost.toml`.

The names here are a public interface (DESIGN.md, Configuration). Only `bot.app` and the
CLI call `load_settings`; everything else receives the typed sub-settings it needs.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from agent_core.models import DEFAULT_FACTS, DEFAULT_MODEL, ModelTable
from bot.heartbeat import HeartbeatSettings
from bot.limit_settings import LimitSettings
from bot.mcp_settings import McpSettings
from bot.policy_settings import PolicySettings

TELEGRAM_API = "https://api.telegram.org/bot"
DISCORD_API = "https://discord.com/api/v10"


class ConfigError(Exception):
    """One clear message naming the offending key(s)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSettings(_Section):
    """One model's facts in `[agent.models."<id>"]` (or ROOST_AGENT__MODELS as JSON); what is
    left out comes from Roost's defaults for that id (agent_core.models)."""

    context_window: int | None = Field(None, ge=1000)
    max_output_tokens: int | None = Field(None, ge=1)
    prefill: bool | None = None
    thinking: bool | None = None
    temperature: bool | None = None
    input_usd_per_mtok: float | None = Field(None, ge=0)
    output_usd_per_mtok: float | None = Field(None, ge=0)
    cache_read_usd_per_mtok: float | None = Field(None, ge=0)
    cache_write_usd_per_mtok: float | None = Field(None, ge=0)
    web_search_usd_per_1k: float | None = Field(None, ge=0)
    price_source: str = ""
    """Where the prices come from (a URL and its date): prices without one are refused."""

    @model_validator(mode="after")
    def _prices_have_a_source(self) -> ModelSettings:
        prices = (self.input_usd_per_mtok, self.output_usd_per_mtok, self.cache_read_usd_per_mtok,
                  self.cache_write_usd_per_mtok, self.web_search_usd_per_1k)  # fmt: skip
        if any(p is not None for p in prices) and not self.price_source.strip():
            raise ValueError("a price needs price_source (where it comes from); without one the cost shows as unknown")
        return self


class AgentSettings(_Section):
    model: str = DEFAULT_MODEL
    """Default: the current Sonnet as the installed SDK lists it (agent_core.models)."""
    fallback_models: list[str] = []
    models: dict[str, ModelSettings] = {}
    web_search: bool = False
    """ROOST_AGENT__WEB_SEARCH: offer the API's web search server tool where the policy allows
    a `read` tool named web_search (agent_core.web_search)."""
    thinking: Literal["off", "adaptive"] | int = "off"
    """ROOST_AGENT__THINKING: off (default: no thinking parameter sent), adaptive, or a token
    budget (≥ 1024). Sent only to models whose facts say they think."""
    """Per-model facts over Roost's defaults (agent_core.models.DEFAULT_FACTS)."""
    max_turns: int = Field(10, ge=1, le=200)
    max_tokens: int = Field(4096, ge=1)
    tool_timeout_s: float = Field(30.0, gt=0)
    exec_max_timeout_s: float = Field(300.0, gt=0)
    exec_sandbox: Literal["auto", "off"] = "auto"
    """auto: commands run in namespaces that cannot see Roost (refused where none can be
    made); off: the owner's explicit choice to run them unsandboxed."""
    exec_hide: list[Path] = []
    """More paths commands must not see (e.g. a file the secrets are also kept in)."""
    approval_ttl_s: float = Field(600.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10)
    """Retries of a failing model (backoff with jitter, honouring retry-after) before the
    next fallback model; done by agent_core.failover, never by the SDK."""
    stall_timeout_s: float = Field(60.0, gt=0)
    """A model stream with no event for this long is treated as broken (retried)."""
    slow_first_token_s: float | None = Field(None, gt=0)
    """Latency fallback: no first token within this many seconds → the next model. Off by default."""
    queue_mode: Literal["collect", "followup", "steer", "interrupt"] = "collect"
    max_concurrent_runs: int = Field(16, ge=1)
    context_window_tokens: int | None = Field(None, ge=1000)
    """An override of every model's context window for compaction; None (default): the
    window of the model a run uses, from the model table."""
    compact_at: float = Field(0.75, gt=0, le=1)
    """Compact a session when its estimated context reaches this share of the window."""
    compact_keep_tokens: int = Field(20_000, ge=0)
    """The newest turns kept verbatim by a compaction."""
    compact_timeout_s: float = Field(120.0, gt=0)

    @field_validator("thinking", mode="before")
    @classmethod
    def _thinking_mode(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        elif isinstance(value, str) and value.strip().lower() not in ("off", "adaptive"):
            raise ValueError(f"{value!r}: use off, adaptive or a thinking token budget (at least 1024)")
        if isinstance(value, int) and not isinstance(value, bool) and value < 1024:
            raise ValueError("a thinking budget must be at least 1024 tokens (or off / adaptive)")
        return value.strip().lower() if isinstance(value, str) else value

    def model_table(self) -> ModelTable:
        """Roost's defaults with `models` laid over them, id by id."""
        table = dict(DEFAULT_FACTS)
        for model_id, given in self.models.items():
            base = ModelTable(DEFAULT_FACTS)(model_id)
            table[model_id] = replace(base, **given.model_dump(exclude_none=True, exclude_defaults=True))
        return ModelTable(table)


class TelegramSettings(_Section):
    base_url: str = TELEGRAM_API
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None
    webhook_listen: str = "0.0.0.0:8443"
    webhook_secret: SecretStr | None = None
    allowed_groups: list[str] = []
    base_file_url: str | None = None
    """Where files are downloaded (ROOST_TELEGRAM__BASE_FILE_URL); None: base_url with its
    final /bot replaced by /file/bot."""

    @field_validator("allowed_groups", mode="before")
    @classmethod
    def _ids_as_str(cls, value: Any) -> Any:
        return [str(v) for v in value] if isinstance(value, list) else value

    @model_validator(mode="after")
    def _webhook_complete(self) -> TelegramSettings:
        # Without a secret anyone who reaches the port could post updates as the owner.
        if self.mode == "webhook":
            if not self.webhook_url:
                raise ValueError("webhook mode needs ROOST_TELEGRAM__WEBHOOK_URL")
            secret = self.webhook_secret.get_secret_value() if self.webhook_secret else ""
            if len(secret) < 16:
                raise ValueError("webhook mode needs ROOST_TELEGRAM__WEBHOOK_SECRET of at least 16 characters")
        return self


class DiscordSettings(_Section):
    allowed_guilds: list[str] = []
    allowed_channels: list[str] = []
    api_base: str = DISCORD_API
    """REST base of any Discord-compatible server (ROOST_DISCORD__API_BASE)."""
    gateway_url: str | None = None
    """Gateway websocket URL (ROOST_DISCORD__GATEWAY_URL); None: Discord's, or the one a
    non-default api_base names at GET /gateway/bot."""

    @field_validator("allowed_guilds", "allowed_channels", mode="before")
    @classmethod
    def _ids_as_str(cls, value: Any) -> Any:
        return [str(v) for v in value] if isinstance(value, list) else value


class DashboardSettings(_Section):
    listen: str = "127.0.0.1:8765"
    """host:port the dashboard serves on inside `roost run` (ROOST_DASHBOARD__LISTEN); empty: off."""
    allow_remote: bool = False
    """A non-loopback `listen` is refused unless this is true (ROOST_DASHBOARD__ALLOW_REMOTE)."""

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        value = value.strip()
        if value:
            host, sep, port = value.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
                raise ValueError(f"{value!r} is not like 127.0.0.1:8765 (host:port), or empty to turn it off")
        return value

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port), or None when the dashboard is off."""
        if not self.listen:
            return None
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


class MediaSettings(_Section):
    max_mb: float = Field(20.0, gt=0)
    """The largest file fetched (ROOST_MEDIA__MAX_MB); larger ones are refused with a notice."""
    max_images: int = Field(10, ge=1, le=100)
    """Images shown to the model per turn; more are saved and described."""


def local_stt_installed() -> bool:
    """Whether the `local` speech-to-text engine can run (pocketsphinx, the `local-stt` extra)."""
    import importlib.util

    return importlib.util.find_spec("pocketsphinx") is not None


class SttSettings(_Section):
    engine: Literal["openai", "local", "off"] | None = None
    """ROOST_STT__ENGINE; None: openai when a base URL is set, else local when pocketsphinx is
    installed (the `local-stt` extra), else off."""
    base_url: str | None = None
    """Any OpenAI-compatible API root serving /v1/audio/transcriptions (OpenAI, Groq, a local
    whisper server), e.g. https://api.openai.com."""
    api_key: SecretStr | None = None
    model: str = "whisper-1"
    timeout_s: float = Field(60.0, gt=0)

    @property
    def active(self) -> Literal["openai", "local", "off"]:
        if self.engine is not None:
            return self.engine
        if self.base_url:
            return "openai"
        return "local" if local_stt_installed() else "off"


class TtsSettings(_Section):
    base_url: str | None = None
    """Any OpenAI-compatible API root serving /v1/audio/speech; None: /voice is unavailable."""
    api_key: SecretStr | None = None
    model: str = "tts-1"
    voice: str = "alloy"
    timeout_s: float = Field(60.0, gt=0)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ROOST_", env_nested_delimiter="__", extra="forbid", populate_by_name=True
    )

    home: Path = Path("~/.roost")
    database_url: str | None = None
    workspace: Path | None = None
    owners: list[str] = []
    approvers: list[str] = []
    """Who may press approval buttons besides the owners (ROOST_APPROVERS)."""
    agent: AgentSettings = AgentSettings()
    telegram: TelegramSettings = TelegramSettings()
    discord: DiscordSettings = DiscordSettings()
    media: MediaSettings = MediaSettings()
    stt: SttSettings = SttSettings()
    tts: TtsSettings = TtsSettings()
    policy: PolicySettings = PolicySettings()
    """Hot-reloaded from roost.toml while running."""
    limits: LimitSettings = LimitSettings()
    """Hot-reloaded from roost.toml while running."""
    mcp: McpSettings = McpSettings()
    """MCP servers whose tools are offered (bot/mcp_settings.py)."""
    log_level: str = "INFO"
    timezone: str | None = None
    """IANA zone for schedules (ROOST_TIMEZONE); None: the machine's."""
    heartbeat: HeartbeatSettings = HeartbeatSettings()
    dashboard: DashboardSettings = DashboardSettings()
    health_listen: str | None = None
    """host:port where `roost run` answers GET /healthz for a load balancer (ROOST_HEALTH_LISTEN)."""
    health_drain_s: float = Field(3.0, ge=0)
    """After SIGTERM, how long /healthz answers 503 while the replica still serves, so the load
    balancer's check (every 2 s in deploy/Caddyfile) takes it out before its webhook server
    closes (ROOST_HEALTH_DRAIN_S); only with ROOST_HEALTH_LISTEN."""

    telegram_bot_token: SecretStr | None = Field(
        None, validation_alias=AliasChoices("TELEGRAM_BOT_TOKEN", "telegram_bot_token")
    )
    discord_bot_token: SecretStr | None = Field(
        None, validation_alias=AliasChoices("DISCORD_BOT_TOKEN", "discord_bot_token")
    )
    anthropic_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("ANTHROPIC_API_KEY", "anthropic_api_key")
    )
    anthropic_base_url: str | None = Field(
        None, validation_alias=AliasChoices("ANTHROPIC_BASE_URL", "anthropic_base_url")
    )

    @field_validator("telegram_bot_token", "discord_bot_token", "anthropic_api_key", "anthropic_base_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("timezone")
    @classmethod
    def _iana_zone(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        from bot.scheduling.schedules import zone

        zone(value.strip())  # raises with "use an IANA name like Europe/Berlin"
        return value.strip()

    @field_validator("owners", "approvers")
    @classmethod
    def _owner_format(cls, owners: list[str]) -> list[str]:
        for owner in owners:
            platform, _, user = owner.partition(":")
            if platform not in ("telegram", "discord") or not user:
                raise ValueError(f"{owner!r} is not like 'telegram:123' or 'discord:456'")
        return owners

    @property
    def home_dir(self) -> Path:
        return self.home.expanduser()

    @property
    def workspace_dir(self) -> Path:
        return (self.workspace or self.home_dir / "workspace").expanduser()

    @property
    def tz_name(self) -> str:
        """The schedules' zone: ROOST_TIMEZONE, else the machine's."""
        if self.timezone:
            return self.timezone
        import tzlocal

        return tzlocal.get_localzone_name() or "UTC"

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{self.home_dir / 'roost.db'}"

    @property
    def secrets(self) -> list[str]:
        """Every secret value, for the log redaction filter."""
        values = [self.telegram_bot_token, self.discord_bot_token, self.anthropic_api_key, self.telegram.webhook_secret,
                  self.stt.api_key, self.tts.api_key]
        found = [v.get_secret_value() for v in values if v is not None and v.get_secret_value()]
        return found + self.mcp.secret_values()  # what [mcp] ${VAR} references stand for

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, config_path()))


def config_path() -> Path:
    explicit = os.environ.get("ROOST_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get("ROOST_HOME", "~/.roost")).expanduser() / "roost.toml"


def load_settings(**overrides: Any) -> Settings:
    """Read the environment and roost.toml; raise ConfigError naming each bad key."""
    explicit = os.environ.get("ROOST_CONFIG")
    if explicit and not Path(explicit).expanduser().is_file():
        raise ConfigError(f"ROOST_CONFIG points to {explicit}, which does not exist.")
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    except ValueError as exc:  # e.g. a JSON list that does not parse
        raise ConfigError(f"invalid configuration: {exc}") from None


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        lines.append(f"  {_env_name(err['loc'])}: {err['msg'].removeprefix('Value error, ')}")
    return "invalid configuration:\n" + "\n".join(lines)


_UNPREFIXED = {
    "telegram_bot_token": "TELEGRAM_BOT_TOKEN",
    "discord_bot_token": "DISCORD_BOT_TOKEN",
    "anthropic_api_key": "ANTHROPIC_API_KEY",
    "anthropic_base_url": "ANTHROPIC_BASE_URL",
}


def _env_name(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if not isinstance(p, int)]
    if not parts:
        return "configuration"
    if parts[0] in _UNPREFIXED or parts[0] in _UNPREFIXED.values():
        return _UNPREFIXED.get(parts[0], parts[0])
    if parts[0] in ("policy", "limits", "mcp"):  # roost.toml tables: named as the hot reload names them
        return ".".join(parts)
    return "ROOST_" + "__".join(p.upper() for p in parts)
