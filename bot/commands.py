"""Chat commands, platform-neutral: parsing and the text each one answers with."""

from __future__ import annotations

from dataclasses import dataclass

from agent_core.models import ModelTable

COMMANDS: dict[str, str] = {
    "start": "introduction and how to use me",
    "help": "what I can do and the commands",
    "new": "start a fresh session (I forget this chat's history)",
    "stop": "cancel the answer I'm working on",
    "status": "model, session, turns, tokens, cost and context size",
    "model": "show or switch the model: /model <name>",
    "jobs": "scheduled jobs here: next and last run, Run now / Pause / Cancel",
    "plan": "the current plan: steps, what each needs to be done, evidence so far; the locked goal",
    "queue": "messages while I'm busy: /queue collect|followup|steer|interrupt",
    "usage": "runs, tokens, cache hits and estimated cost: today and this week",
    "compact": "summarise older messages now so the conversation fits (all stay stored)",
    "retry": "try again a voice note I couldn't transcribe",
    "voice": "answers to voice notes as voice notes too: /voice on|off",
}
GROUP_COMMANDS: dict[str, str] = {
    "allow": "owner only: let me answer in this group",
    "disallow": "owner only: stop answering in this group",
}
OWNER_COMMANDS: dict[str, str] = {
    "allow": "owner, private chat: /allow telegram:42 (a user) or /allow group telegram:-100… (a group)",
    "revoke": "owner, private chat: /revoke telegram:42 or /revoke group telegram:-100…",
    "audit": "owner, private chat: the last 20 entries of the audit trail",
    "grants": "owner, private chat: the 'always allow' rules; /grants revoke <id>",
}
"""Not registered with the platform's command menu: only the owner can use them."""

HELP = "\n".join(
    [
        "I'm Roost, a personal AI agent.",
        "In a private chat with my owner I remember things and can act on their machine; "
        "anything risky waits for a button press. In groups, mention me (@name or reply to "
        "me) and I answer with no access to private memory.",
        "",
        "Commands:",
        *[f"/{name} — {text}" for name, text in COMMANDS.items()],
        *[f"/{name} — {text}" for name, text in GROUP_COMMANDS.items()],
        *[f"/{name} — {text}" for name, text in OWNER_COMMANDS.items()],
    ]
)


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    args: str


def parse_command(text: str, bot_username: str | None = None) -> Command | None:
    """`/name[@bot] args` → Command; None for ordinary text or a command for another bot."""
    if not text.startswith("/") or len(text) < 2:
        return None
    head, _, args = text[1:].partition(" ")
    name, _, addressee = head.partition("@")
    if addressee and bot_username and addressee.lower() != bot_username.lower():
        return None
    if not name or not name.replace("_", "").isalnum():
        return None
    return Command(name.lower(), args.strip())


def estimate_cost(
    model: str, input_tokens: int, output_tokens: int, cache_read: int, cache_write: int,
    prices: ModelTable | None = None, web_searches: int = 0,
) -> float | None:
    """The cost at the prices configured for `model` with their source (ROOST_AGENT__MODELS);
    None — shown as "unknown" — without them: never a guess."""
    if prices is None:
        return None
    return prices(model).cost_usd(input_tokens, output_tokens, cache_read, cache_write, web_searches)
