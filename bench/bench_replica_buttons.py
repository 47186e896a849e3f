"""Button-press latency across replicas: an approval card shown by the run on replica A,
pressed through replica B (the press reaches A over LISTEN/NOTIFY) or through A itself.

Run: eval "$(bash .ci/postgres.sh)"; .venv/bin/python bench/bench_replica_buttons.py [--presses 40]

Two full apps in this process on one fresh PostgreSQL database, Telegram in webhook mode:
python-telegram-bot talks HTTP to the fake Bot API, which routes each update to the replica
named (a load balancer); the anthropic SDK talks HTTP to the fake Messages API. Each round:
the owner's message reaches A, its run asks to run `true`, the card's "Approve once" is
pressed through B (cross-replica) or A (same replica). Figures, p50 / p95:
- press → answered: the press update made → Roost's answerCallbackQuery done;
- press → run goes on: the press update made → the run's next model request arriving.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.anthropic_api import FakeAnthropic  # noqa: E402
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools  # noqa: E402
from tests.fakes.telegram_api import FakeTelegram  # noqa: E402
from tests.storage_fixtures import fresh_postgres_database  # noqa: E402
from tests.telegram_harness import BOT_USERNAME, OWNER, TOKEN, free_port, running  # noqa: E402

SECRET = "bench-secret_0123456789"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def show(label: str, values: list[float]) -> None:
    ms = [v * 1000 for v in values]
    print(f"  {label:<34} p50 {statistics.median(ms):7.1f} ms   p95 {pct(ms, 95):7.1f} ms   (n={len(ms)})")


async def bench(presses: int) -> None:
    with FakeTelegram(token=TOKEN, bot_username=BOT_USERNAME) as tg, FakeAnthropic() as llm:
        tg.add_chat(OWNER, type="private", first_name="Olivia")
        with tempfile.TemporaryDirectory() as tmp:
            async with fresh_postgres_database() as url, contextlib.AsyncExitStack() as stack:
                hooks = []
                for name in ("a", "b"):
                    port = free_port()
                    hook = f"http://127.0.0.1:{port}/tg/hook"
                    telegram = {"mode": "webhook", "webhook_url": hook, "webhook_listen": f"127.0.0.1:{port}",
                                "webhook_secret": SECRET}
                    await stack.enter_async_context(running(
                        Path(tmp) / name, tg, llm, paced=False, telegram=telegram, database_url=url,
                        workspace=Path(tmp) / "workspace",
                    ))  # fmt: skip
                    hooks.append(hook)
                results: dict[str, tuple[list[float], list[float]]] = {}
                for label, via in (("same replica (A → A)", hooks[0]), ("cross-replica (B → A)", hooks[1])):
                    results[label] = await rounds(tg, llm, hooks[0], via, presses, label[:4])
                print(f"approval press latency, {presses} presses each (2 replicas, one PostgreSQL):")
                for label, (answered, went_on) in results.items():
                    print(f" {label}")
                    show("press → answered", answered)
                    show("press → run goes on", went_on)


async def rounds(tg: FakeTelegram, llm: FakeAnthropic, runs_on: str, via: str, presses: int, tag: str) -> tuple[list[float], list[float]]:
    answered: list[float] = []
    went_on: list[float] = []
    for i in range(presses):
        llm.script(reply_tools(ToolUse("exec", {"command": "true"})), reply_text(f"done {tag}-{i}."))
        cards = len(_cards(tg))
        tg.route_webhook(runs_on)
        tg.send_private(OWNER, f"round {tag}-{i}")
        card = (await tg.await_for(lambda: len(_cards(tg)) > cards and _cards(tg), 30))[-1]
        data = next(b["callback_data"] for row in card.reply_markup["inline_keyboard"] for b in row
                    if b["text"] == "✅ Approve once")
        tg.route_webhook(via)
        pressed = time.monotonic()
        query = tg.press_button(OWNER, card.message_id, OWNER, data, first_name="Olivia")
        await tg.await_for(lambda: tg.callback_query(query).answered, 30)
        await tg.await_for(lambda: any(m.text and f"done {tag}-{i}." in m.text for m in tg.bot_messages(OWNER)), 30)
        answered.append(_answer_time(tg, query) - pressed)
        went_on.append(min(r.received_at for r in llm.requests if r.received_at >= pressed) - pressed)
    return answered, went_on


def _cards(tg: FakeTelegram) -> list[Any]:
    return [m for m in tg.bot_messages(OWNER) if (m.text or "").startswith("🔐")]


def _answer_time(tg: FakeTelegram, query: str) -> float:
    return next(c.finished_at for c in tg.calls
                if c.method == "answerCallbackQuery" and c.params.get("callback_query_id") == query)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presses", type=int, default=40)
    args = parser.parse_args()
    asyncio.run(bench(args.presses))


if __name__ == "__main__":
    main()
