"""web_fetch over real HTTP against a local server: SSRF guard, redirects, caps, HTML → text."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agent_core.builtin_tools.web import WebFetchInput, is_public_address, make_web_fetch_tool
from agent_core.builtin_tools.web_text import html_to_text
from agent_core.risk import Risk, Scope
from agent_core.tools import Tool, ToolContext, ToolError

PAGE = b"""<!doctype html><html><head><title>Test  Page</title>
<style>body { color: red }</style><script>var SCRIPT_CANARY = 1;</script></head>
<body><nav><a href="/menu">NAV_CANARY</a></nav>
<h1>Hello</h1><p>First paragraph with <a href="/other">a link</a>.</p>
<p>Second paragraph.</p><ul><li>one</li><li>two</li></ul>
<!-- COMMENT_CANARY --></body></html>"""


class _Handler(BaseHTTPRequestHandler):
    release: threading.Event

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        port = self.server.server_address[1]
        if self.path == "/page":
            self._send(200, PAGE)
        elif self.path == "/redirect-same":
            self._send(302, b"", headers={"Location": "/page"})
        elif self.path == "/redirect-localhost":
            self._send(302, b"", headers={"Location": f"http://localhost:{port}/page"})
        elif self.path == "/big":
            self._send(200, b"<p>" + b"word " * 700_000 + b"</p>")
        elif self.path == "/image":
            self._send(200, b"\x89PNG\r\n", "image/png")
        elif self.path == "/json":
            self._send(200, b'{"ok": true}', "application/json")
        elif self.path == "/slow":
            self.release.wait(30)
            self._send(200, b"late")
        else:
            self._send(404, b"<p>not here</p>")


@pytest.fixture
def server() -> Iterator[str]:
    release = threading.Event()
    handler = type("Handler", (_Handler,), {"release": release})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


async def fetch(tool: Tool[Any], url: str) -> str:
    ctx = ToolContext(session_key="main", scope=Scope.MAIN, workspace=Path("."))
    return await tool.func(WebFetchInput(url=url), ctx)


def test_metadata() -> None:
    tool = make_web_fetch_tool()
    assert tool.risk is Risk.READ and tool.name == "web_fetch"


async def test_loopback_is_refused_by_default(server: str) -> None:
    tool = make_web_fetch_tool()
    with pytest.raises(ToolError, match="non-public address"):
        await fetch(tool, server + "/page")
    port = server.rsplit(":", 1)[1]
    with pytest.raises(ToolError, match="non-public address"):
        await fetch(tool, f"http://localhost:{port}/page")


async def test_allowed_when_configured(server: str) -> None:
    out = await fetch(make_web_fetch_tool(allow_private=True), server + "/page")
    assert out.startswith(f"URL: {server}/page\nTitle: Test Page\n")
    assert "# Hello" in out
    assert f"First paragraph with [a link]({server}/other)." in out
    assert "Second paragraph." in out and "- one\n- two" in out
    for canary in ("SCRIPT_CANARY", "NAV_CANARY", "color: red", "COMMENT_CANARY"):
        assert canary not in out


async def test_every_redirect_hop_is_checked(server: str) -> None:
    tool = make_web_fetch_tool(allowed_hosts=["127.0.0.1"])
    assert "# Hello" in await fetch(tool, server + "/redirect-same")
    with pytest.raises(ToolError, match="refusing to fetch from localhost"):
        await fetch(tool, server + "/redirect-localhost")


async def test_connects_to_the_address_it_checked(server: str) -> None:
    port = server.rsplit(":", 1)[1]
    seen: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        seen.append(host)
        return ["127.0.0.1"]

    tool = make_web_fetch_tool(allowed_hosts=["pinned.test"], resolver=resolver)
    assert "# Hello" in await fetch(tool, f"http://pinned.test:{port}/page")
    assert seen == ["pinned.test"]


async def test_any_private_address_blocks_the_host() -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return ["93.184.216.34", "10.1.2.3"]

    with pytest.raises(ToolError, match=r"non-public address \(10.1.2.3\)"):
        await fetch(make_web_fetch_tool(resolver=resolver), "http://mixed.test/")


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "100.64.0.1",
     "0.0.0.0", "224.0.0.1", "240.0.0.1", "255.255.255.255", "::1", "fe80::1", "fc00::1",
     "::ffff:127.0.0.1", "ff02::1", "::"],
)
def test_non_public_addresses(address: str) -> None:
    assert not is_public_address(address)


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses(address: str) -> None:
    assert is_public_address(address)


async def test_size_caps(server: str) -> None:
    out = await fetch(make_web_fetch_tool(allow_private=True), server + "/big")
    assert "download stopped at 2,097,152 bytes" in out
    assert "showing the first 20,000 of" in out
    assert len(out) < 20_300


async def test_errors_are_clear(server: str) -> None:
    tool = make_web_fetch_tool(allow_private=True)
    with pytest.raises(ToolError, match="HTTP 404"):
        await fetch(tool, server + "/missing")
    with pytest.raises(ToolError, match="unsupported content type 'image/png'"):
        await fetch(tool, server + "/image")
    with pytest.raises(ToolError, match="only http"):
        await fetch(tool, "file:///etc/passwd")
    with pytest.raises(ToolError, match="only http"):
        await fetch(tool, "ftp://example.com/x")
    assert '{"ok": true}' in await fetch(tool, server + "/json")


async def test_time_cap(server: str) -> None:
    tool = make_web_fetch_tool(allow_private=True, timeout_s=0.3)
    with pytest.raises(ToolError, match="timed out after 0.3 s"):
        await fetch(tool, server + "/slow")


def test_html_to_text_structure() -> None:
    title, text = html_to_text(
        "<html><head><title>T</title></head><body><h2>Sub</h2><p>a<br>b</p>"
        "<table><tr><td>x</td><td>y</td></tr></table><pre>  code\n  more</pre>"
        "<a href='javascript:void(0)'>js</a> <a href='https://e.com/'>abs</a></body></html>",
        "https://base.test/dir/",
    )
    assert title == "T"
    assert "## Sub" in text and "a\nb" in text and "| x | y" in text
    assert "```\n  code\n  more\n```" in text
    assert "js [abs](https://e.com/)" in text
