"""The workspace part of the system prompt, built per scope (DESIGN.md, Context by scope).

`stable` depends only on file contents and the date, never on the time of day, so the same
files on the same day give byte-identical text (prompt caching); `volatile` carries the
clock and today's log. Caps: 20,000 characters per file, 4,000 for USER.md, 60,000 in total;
every cut leaves a visible notice in the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from workspace.access import check_session, is_main
from workspace.daily_log import log_path
from workspace.skills import list_skills, skills_prompt

FILE_CAP = 20_000
USER_CAP = 4_000
TOTAL_CAP = 60_000

SHARED_FILES: tuple[str, ...] = ("SOUL.md", "IDENTITY.md", "AGENTS.md")
MAIN_ONLY_FILES: tuple[str, ...] = ("USER.md", "MEMORY.md")
_CAPS = {"USER.md": USER_CAP}


@dataclass(frozen=True, slots=True)
class PromptContext:
    stable: str
    """Identity files, skills list, (main) USER/MEMORY and yesterday's log. No clock."""
    volatile: str
    """Current date and time, and this session's log of today."""


@dataclass(slots=True)
class _Budget:
    left: int = TOTAL_CAP


def build_context(root: Path, session_key: str, scope: str, now: datetime) -> PromptContext:
    """Assemble the prompt context a session may see; missing or empty files are skipped.

    main: SOUL, IDENTITY, AGENTS, USER, MEMORY, skills, yesterday's log (stable) + now and
    today's log (volatile). sub: SOUL, IDENTITY, AGENTS, skills (stable) + now and its own
    log of today (volatile); never USER.md, MEMORY.md or another session's log.
    `scope` is an `agent_core.risk.Scope` (or its value); a sub scope with the main key
    raises ValueError.
    """
    check_session(session_key, scope)
    main = is_main(scope)
    budget = _Budget()
    today = now.date()

    stable: list[str] = []
    names = SHARED_FILES + (MAIN_ONLY_FILES if main else ())
    for name in names:
        text = _read(root / name)
        if text is not None:
            stable.append(_section(name, text, _CAPS.get(name, FILE_CAP), budget, keep="head"))
    skills = skills_prompt(list_skills(root))
    if skills:
        stable.append(_section("Skills (load_skill to use one)", skills, FILE_CAP, budget, "head"))
    if main:
        yesterday = log_path(root, session_key, today - timedelta(days=1))
        text = _read(yesterday)
        if text is not None:
            title = f"Yesterday's log ({_rel(root, yesterday)})"
            stable.append(_section(title, text, FILE_CAP, budget, keep="tail"))

    volatile = [f"## Now\n{_clock(now)}"]
    today_log = log_path(root, session_key, today)
    text = _read(today_log)
    if text is not None:
        title = f"Today's log ({_rel(root, today_log)})"
        volatile.append(_section(title, text, FILE_CAP, budget, keep="tail"))
    return PromptContext(stable="\n\n".join(stable), volatile="\n\n".join(volatile))


def _section(
    title: str, text: str, cap: int, budget: _Budget, keep: Literal["head", "tail"]
) -> str:
    """`## title` + text, cut to min(cap, what the total budget has left) with a notice."""
    limit = min(cap, budget.left)
    if limit <= 0:
        return f"## {title}\n[omitted: the {TOTAL_CAP:,}-character context cap is reached]"
    if len(text) <= limit:
        budget.left -= len(text)
        return f"## {title}\n{text}"
    budget.left -= limit
    reason = (
        f"the {cap:,}-character limit for this file"
        if limit == cap
        else f"the {TOTAL_CAP:,}-character context cap"
    )
    if keep == "tail":
        shown = text[-limit:]
        note = (
            f"[truncated: showing the last {limit:,} of {len(text):,} characters "
            f"({reason}); read the file for the rest]"
        )
        return f"## {title}\n{note}\n{shown}"
    shown = text[:limit]
    note = (
        f"[truncated: showing the first {limit:,} of {len(text):,} characters "
        f"({reason}); read the file for the rest]"
    )
    return f"## {title}\n{shown}\n{note}"


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    text = text.strip("\n").rstrip()
    return text or None


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def _clock(now: datetime) -> str:
    text = f"Current date and time: {now:%A, %Y-%m-%d %H:%M}"
    if now.tzinfo is not None:
        offset = now.strftime("%z")
        text += f" (UTC{offset[:3]}:{offset[3:]})" if offset else ""
    return text
