"""What Roost knows about each model: its context window, output limit, and which request
features it accepts. The settings build the table (`bot.settings.AgentSettings.models` over
these defaults); the failover client, the loop and compaction read it.

Unknown ids get `UNKNOWN`: a 200k window and no prefill — every model is treated as refusing
prefill unless the table says otherwise, because today's models answer a conversation ending
with an assistant message with a 400. The defaults below were chosen for the families the
installed SDK lists (`anthropic.types.ModelParam`); windows and limits are overridable per id,
and `GET /v1/models` (`roost doctor`) reports what the service itself says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class ModelFacts:
    context_window: int = 200_000
    """Input tokens the model accepts (compaction triggers from this)."""
    max_output_tokens: int = 64_000
    """The largest `max_tokens` it accepts: a larger configured value is clamped to it."""
    prefill: bool = False
    """Accepts a conversation ending with a partial assistant answer."""
    thinking: bool = False
    """Accepts the `thinking` parameter."""
    temperature: bool = False
    """Accepts `temperature` (the newest do not; Roost sends none either way)."""
    input_usd_per_mtok: float | None = None
    output_usd_per_mtok: float | None = None
    cache_read_usd_per_mtok: float | None = None
    cache_write_usd_per_mtok: float | None = None
    web_search_usd_per_1k: float | None = None
    """Per thousand searches of the web search server tool (needed only once it searched)."""
    price_source: str = ""
    """Where the prices come from; without it (or any of the four prices) the cost is unknown.
    Roost ships no prices: none could be written here with a source beside them."""

    def cost_usd(
        self, input_tokens: int, output_tokens: int, cache_read: int, cache_write: int, web_searches: int = 0
    ) -> float | None:
        """What the tokens cost at the configured prices, None when they are not all known."""
        prices = (self.input_usd_per_mtok, self.output_usd_per_mtok, self.cache_read_usd_per_mtok,
                  self.cache_write_usd_per_mtok)  # fmt: skip
        if not self.price_source.strip() or any(p is None for p in prices):
            return None
        if web_searches and self.web_search_usd_per_1k is None:
            return None
        tokens = (input_tokens, output_tokens, cache_read, cache_write)
        searched = web_searches * (self.web_search_usd_per_1k or 0.0) / 1000
        return sum(t * p for t, p in zip(tokens, prices, strict=True)) / 1e6 + searched  # type: ignore[operator]


UNKNOWN = ModelFacts()

_NEWEST = ModelFacts(context_window=1_000_000, max_output_tokens=64_000, thinking=True)
DEFAULT_FACTS: dict[str, ModelFacts] = {
    "claude-sonnet-5-5": _NEWEST,
    "claude-opus-5-5": replace(_NEWEST, max_output_tokens=32_000),
    "claude-haiku-5-5": replace(_NEWEST, context_window=200_000),
    "claude-sonnet-4-6": replace(_NEWEST, temperature=True),
    "claude-opus-4-6": ModelFacts(max_output_tokens=32_000, thinking=True, temperature=True),
    "claude-opus-4-7": ModelFacts(max_output_tokens=32_000, thinking=True, temperature=True),
    "claude-opus-4-8": ModelFacts(max_output_tokens=32_000, thinking=True, temperature=True),
    # The 4.5 family still accepts prefill.
    "claude-sonnet-4-5": ModelFacts(prefill=True, thinking=True, temperature=True),
    "claude-haiku-4-5": ModelFacts(prefill=True, thinking=True, temperature=True),
    "claude-opus-4-5": ModelFacts(max_output_tokens=32_000, prefill=True, thinking=True, temperature=True),
}
DEFAULT_MODEL = "claude-sonnet-5-5"
"""The current Sonnet as SDK 2.14 lists it (first Sonnet in `anthropic.types.ModelParam`)."""

_DATED = re.compile(r"-\d{8}$")

ThinkingMode = str | int
"""ROOST_AGENT__THINKING: "off", "adaptive", or a token budget (≥ 1024)."""


def thinking_param(mode: ThinkingMode) -> dict[str, object] | None:
    """The request's `thinking` parameter, with the display set explicitly (newer models
    omit the reasoning by default; the chat shows that the model is thinking)."""
    if mode == "off":
        return None
    if mode == "adaptive":
        return {"type": "adaptive", "display": "summarized"}
    return {"type": "enabled", "budget_tokens": int(mode), "display": "summarized"}


class ModelTable:
    """Facts by model id: exact id, else the id without its date suffix, else `UNKNOWN`.
    What a refusal taught us at run time (`learn`) overrides the table for this process."""

    def __init__(self, facts: Mapping[str, ModelFacts] | None = None) -> None:
        self._facts = dict(DEFAULT_FACTS if facts is None else facts)
        self._learned: dict[str, ModelFacts] = {}

    def __call__(self, model: str) -> ModelFacts:
        if model in self._learned:
            return self._learned[model]
        return self._facts.get(model) or self._facts.get(_DATED.sub("", model)) or UNKNOWN

    def learn(self, model: str, **changes: object) -> None:
        """E.g. `learn(m, prefill=False)` after the service refused a prefill."""
        self._learned[model] = replace(self(model), **changes)  # type: ignore[arg-type]
