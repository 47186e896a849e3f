"""Skills: discovery, malformed front matter, pick-up without restart, load_skill."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from agent_core.builtin_tools.skills_tool import LOAD_SKILL, LoadSkillInput
from agent_core.risk import Risk, Scope
from agent_core.tools import ToolContext, ToolError
from workspace.skills import SkillInfo, list_skills, skills_prompt


def _skill(root: Path, dirname: str, front: str, body: str = "Do the thing.\n") -> Path:
    path = root / "skills" / dirname / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\n{front}\n---\n{body}", encoding="utf-8")
    return path


async def load(root: Path, name: str, scope: Scope = Scope.MAIN) -> str:
    key = "main" if scope is Scope.MAIN else "group:telegram:1"
    ctx = ToolContext(session_key=key, scope=scope, workspace=root)
    return await LOAD_SKILL.func(LoadSkillInput(name=name), ctx)


def test_discovery_and_prompt(tmp_path: Path) -> None:
    _skill(tmp_path, "weather", "name: weather\ndescription: Check the forecast for a city")
    _skill(tmp_path, "git", "name: git-helper\ndescription: >\n  Commit and\n  push safely")
    skills = list_skills(tmp_path)
    assert skills == [
        SkillInfo("git-helper", "Commit and push safely", Path("skills/git/SKILL.md")),
        SkillInfo("weather", "Check the forecast for a city", Path("skills/weather/SKILL.md")),
    ]
    assert skills_prompt(skills) == (
        "- git-helper: Commit and push safely (skills/git/SKILL.md)\n"
        "- weather: Check the forecast for a city (skills/weather/SKILL.md)"
    )
    assert list_skills(tmp_path / "nowhere") == []


def test_malformed_skills_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _skill(tmp_path, "good", "name: good\ndescription: fine")
    _skill(tmp_path, "badyaml", "name: [unclosed\ndescription: x")
    _skill(tmp_path, "noname", "description: x")
    _skill(tmp_path, "nodesc", "name: nodesc")
    _skill(tmp_path, "list", "- a\n- b")
    _skill(tmp_path, "dup", "name: good\ndescription: duplicate")
    (tmp_path / "skills/nofront").mkdir()
    (tmp_path / "skills/nofront/SKILL.md").write_text("just text", encoding="utf-8")
    (tmp_path / "skills/binary").mkdir()
    (tmp_path / "skills/binary/SKILL.md").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "skills/emptydir").mkdir()
    (tmp_path / "skills/stray.md").write_text("not a skill dir", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="workspace.skills"):
        skills = list_skills(tmp_path)
    assert [s.name for s in skills] == ["good"] and skills[0].description == "fine"
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) >= 7


def test_new_and_changed_skills_are_picked_up_without_restart(tmp_path: Path) -> None:
    path = _skill(tmp_path, "a", "name: a\ndescription: first")
    assert [s.description for s in list_skills(tmp_path)] == ["first"]
    assert list_skills(tmp_path) == list_skills(tmp_path)  # cached while nothing changed
    _skill(tmp_path, "b", "name: b\ndescription: second")
    assert [s.name for s in list_skills(tmp_path)] == ["a", "b"]
    st = path.stat()
    path.write_text("---\nname: a\ndescription: FIRST\n---\nbody\n", encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert [s.description for s in list_skills(tmp_path)] == ["FIRST", "second"]
    (tmp_path / "skills/b/SKILL.md").unlink()
    assert [s.name for s in list_skills(tmp_path)] == ["a"]


def test_symlinked_skill_outside_the_workspace_is_ignored(tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("---\nname: evil\ndescription: x\n---\nsteal\n", encoding="utf-8")
    ws = tmp_path / "ws"
    (ws / "skills/evil").mkdir(parents=True)
    (ws / "skills/evil/SKILL.md").symlink_to(outside)
    assert list_skills(ws) == []


async def test_load_skill_returns_the_body(tmp_path: Path) -> None:
    assert LOAD_SKILL.risk is Risk.READ
    _skill(tmp_path, "weather", "name: weather\ndescription: forecast", "# Steps\n1. curl wttr.in\n")
    out = await load(tmp_path, "weather", Scope.SUB)
    assert out == "# Skill: weather (skills/weather/SKILL.md)\n\n# Steps\n1. curl wttr.in"
    assert "description:" not in out
    with pytest.raises(ToolError, match=r"no skill named 'nope' \(available: weather\)"):
        await load(tmp_path, "nope")
    _skill(tmp_path, "late", "name: late\ndescription: added later", "late body")
    assert "late body" in await load(tmp_path, "late")
