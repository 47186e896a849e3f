"""Built-in tools: files, exec, web_fetch, memory, skills, send_message and send_file.

`default_tools()` returns them in a fixed order (the tool schemas are part of the cached,
byte-stable prompt prefix).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agent_core.builtin_tools.exec_tool import (
    DEFAULT_MAX_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    make_exec_tool,
)
from agent_core.builtin_tools.files import file_tools
from agent_core.builtin_tools.sandbox import Sandbox
from agent_core.builtin_tools.memory_tools import memory_tools
from agent_core.builtin_tools.messaging import SEND_FILE, SEND_MESSAGE
from agent_core.builtin_tools.skills_tool import LOAD_SKILL
from agent_core.builtin_tools.web import Resolver, make_web_fetch_tool
from agent_core.tools import Tool

__all__ = ["default_tools"]


def default_tools(
    *,
    exec_max_timeout_s: float = DEFAULT_MAX_TIMEOUT_S,
    exec_default_timeout_s: float = DEFAULT_TIMEOUT_S,
    exec_cwd: Path | None = None,
    exec_env: Mapping[str, str] | None = None,
    exec_sandbox: Sandbox | None = None,
    web_allow_private: bool = False,
    web_allowed_hosts: Iterable[str] = (),
    web_resolver: Resolver | None = None,
) -> list[Tool[Any]]:
    """read_file, write_file, edit_file, list_dir, exec, web_fetch, memory_search,
    memory_get, memory_write, load_skill, send_message, send_file."""
    return [
        *file_tools(),
        make_exec_tool(
            max_timeout_s=exec_max_timeout_s,
            default_timeout_s=exec_default_timeout_s,
            cwd=exec_cwd,
            env=exec_env,
            sandbox=exec_sandbox,
        ),
        make_web_fetch_tool(
            allow_private=web_allow_private,
            allowed_hosts=web_allowed_hosts,
            resolver=web_resolver,
        ),
        *memory_tools(),
        LOAD_SKILL,
        SEND_MESSAGE,
        SEND_FILE,
    ]
