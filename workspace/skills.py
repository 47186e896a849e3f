"""Skills: `skills/<name>/SKILL.md` files with YAML front matter (name, description).

`list_skills` is cheap enough to call on every run: it stats the SKILL.md files and reuses
the parsed result while no mtime or size changed, so new or edited skills are picked up
without a restart. A malformed skill is skipped with a logged warning, never an exception.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SKILLS_DIR = "skills"
SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 256_000
MAX_DESCRIPTION_CHARS = 300


@dataclass(frozen=True, slots=True)
class SkillInfo:
    name: str
    description: str
    path: Path
    """Relative to the workspace root, e.g. skills/weather/SKILL.md."""


_Signature = tuple[tuple[str, int, int], ...]
_cache: dict[Path, tuple[_Signature, list[SkillInfo]]] = {}


def list_skills(root: Path) -> list[SkillInfo]:
    """Valid skills under `root/skills/`, sorted by name. Of two skills with one name, the one
    in `skills/<name>/` wins, else the first directory in sorted order."""
    skills_dir = root / SKILLS_DIR
    signature = _signature(skills_dir)
    key = root.resolve()
    cached = _cache.get(key)
    if cached is not None and cached[0] == signature:
        return list(cached[1])
    found: dict[str, SkillInfo] = {}
    real_root = key
    for dirname, _, _ in signature:
        path = skills_dir / dirname / SKILL_FILE
        info = _parse_info(path, real_root)
        if info is None:
            continue
        other = found.get(info.name)
        if other is not None:
            # The skill living in skills/<its name>/ wins; otherwise the first directory.
            keep, drop = (info, other) if dirname == info.name else (other, info)
            log.warning("skills.duplicate name=%s kept=%s skipped=%s", info.name, keep.path, drop.path)
            found[info.name] = keep
            continue
        found[info.name] = info
    result = sorted(found.values(), key=lambda s: s.name)
    _cache[key] = (signature, result)
    return list(result)


def find_skill(root: Path, name: str) -> SkillInfo | None:
    return next((s for s in list_skills(root) if s.name == name), None)


def load_skill_body(root: Path, skill: SkillInfo) -> str:
    """The skill's instructions: the file without its front matter. Raises OSError if the
    file went away."""
    text = (root / skill.path).read_text(encoding="utf-8", errors="replace")
    split = _split_front_matter(text)
    return (split[1] if split else text).strip()


def skills_prompt(skills: list[SkillInfo]) -> str:
    """One compact line per skill: `- name: description (skills/name/SKILL.md)`."""
    return "\n".join(f"- {s.name}: {s.description} ({s.path.as_posix()})" for s in skills)


def _signature(skills_dir: Path) -> _Signature:
    entries: list[tuple[str, int, int]] = []
    try:
        names = sorted(os.listdir(skills_dir))
    except OSError:
        return ()
    for name in names:
        try:
            st = os.stat(skills_dir / name / SKILL_FILE)
        except OSError:
            continue
        entries.append((name, st.st_mtime_ns, st.st_size))
    return tuple(entries)


def _parse_info(path: Path, real_root: Path) -> SkillInfo | None:
    try:
        real = path.resolve()
        if not real.is_relative_to(real_root):
            log.warning("skills.outside_workspace path=%s", path)
            return None
        if real.stat().st_size > MAX_SKILL_BYTES:
            log.warning("skills.too_large path=%s", path)
            return None
        text = real.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("skills.unreadable path=%s error=%s", path, exc)
        return None
    split = _split_front_matter(text)
    if split is None:
        log.warning("skills.no_front_matter path=%s", path)
        return None
    import yaml  # here: a workspace without skills never pays its ~0.8 MB of RSS

    try:
        meta = yaml.safe_load(split[0])
    except yaml.YAMLError as exc:
        log.warning("skills.bad_yaml path=%s error=%s", path, exc)
        return None
    if not isinstance(meta, dict):
        log.warning("skills.bad_front_matter path=%s", path)
        return None
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not name.strip() or len(name.split()) != 1:
        log.warning("skills.bad_name path=%s name=%r", path, name)
        return None
    if not isinstance(description, str) or not description.strip():
        log.warning("skills.no_description path=%s", path)
        return None
    desc = " ".join(description.split())
    if len(desc) > MAX_DESCRIPTION_CHARS:
        desc = desc[: MAX_DESCRIPTION_CHARS - 1].rstrip() + "…"
    rel = Path(SKILLS_DIR, path.parent.name, SKILL_FILE)
    return SkillInfo(name=name.strip(), description=desc, path=rel)


def _split_front_matter(text: str) -> tuple[str, str] | None:
    """(front matter, body) of a document starting with a `---` line, else None."""
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            return "".join(lines[1:i]), "".join(lines[i + 1 :])
    return None
