"""Discord adapter figures over the wire: discord.py talking HTTP and a websocket to the
fake Discord (tests/fakes/discord_api.py).

Run: .venv/bin/python bench/bench_discord.py [--pings 20]

Prints:
- adapter overhead: gateway event dispatched by the fake → first REST call from Roost
  arriving at the fake (the typing indicator or the answer), p50 / p99, for 1 channel at a
  time and for 100 channels at once; an in-process handler answers at once with a canned
  run, so the figures are the adapter's (and discord.py's, and HTTP's) cost;
- REST calls for one streamed 3,000-character answer (the whole app, the real anthropic
  SDK against the fake Messages API streaming for 3 s), with edit spacing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_telegram import InstantHandler  # noqa: E402  (platform-neutral canned runs)

from adapters.discord import DiscordAdapter  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropic  # noqa: E402
from tests.fakes.anthropic_script import Reply, Text  # noqa: E402
from tests.fakes.discord_api import FakeDiscord  # noqa: E402
from tests.discord_harness import OWNER, TOKEN, running, world  # noqa: E402

BOT_MENTION = "<@900000000000000001>"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def show(label: str, ms: list[float]) -> None:
    print(f"{label:<44} p50 {pct(ms, 0.5):7.1f} ms   p99 {pct(ms, 0.99):7.1f} ms   (n={len(ms)})")


async def first_call_after(fake: FakeDiscord, channel: str, since: float) -> float:
    def found() -> float | None:
        return next((c.at for c in fake.calls if c.at >= since and f"/channels/{channel}/" in c.path), None)

    return await fake.await_for(found, 30)


async def overhead(pings: int) -> None:
    channels = [f"6000000000000{n:05d}" for n in range(100)]
    with FakeDiscord(token=TOKEN) as fake:
        fake.add_user(OWNER, "olivia")
        fake.add_guild("600", channels)
        handler = InstantHandler()
        adapter = DiscordAdapter(TOKEN, api_base=fake.api_base, gateway_url=fake.gateway_url,
                                 guild_ready_timeout_s=0.2, edit_interval_s=0.0)
        handler.adapter = adapter  # type: ignore[assignment]
        await adapter.start(handler)  # type: ignore[arg-type]
        try:
            dm = fake.dm_channel(OWNER)
            one: list[float] = []
            for _ in range(pings):
                t0 = time.monotonic()
                fake.say(dm, OWNER, "ping")
                one.append((await first_call_after(fake, dm, t0) - t0) * 1000)
                await asyncio.gather(*handler._runs)  # noqa: SLF001  (the canned run is done)
            show("event → first REST call, 1 channel", one)
            many: list[float] = []
            for _ in range(1):
                t0 = time.monotonic()
                for channel in channels:
                    fake.say(channel, OWNER, f"{BOT_MENTION} ping", mention_bot=True)
                firsts = await asyncio.gather(*(first_call_after(fake, c, t0) for c in channels))
                many += [(t - t0) * 1000 for t in firsts]
            show("event → first REST call, 100 channels at once", many)
        finally:
            await handler.aclose()
            await adapter.aclose()


async def streamed() -> None:
    answer = ("The agent streams answers by editing one message in place. " * 60)[:3000]
    with tempfile.TemporaryDirectory() as tmp, FakeDiscord(token=TOKEN) as fake, FakeAnthropic() as llm:
        world(fake)
        llm.script(Reply(Text(answer, chunk_size=20, delay_s=3.0 / 150)))
        async with running(Path(tmp), fake, llm) as h:
            dm = fake.dm_channel(OWNER)
            t0 = time.monotonic()
            fake.say(dm, OWNER, "a long one")
            await fake.await_for(lambda: [m.content for m in fake.bot_messages(dm)] == h_rendered(answer), 60)
            calls = [c for c in fake.calls if c.at >= t0 and f"/channels/{dm}/" in c.path]
            changes = [c for c in calls if c.method in ("POST", "PATCH") and "/messages" in c.path]
            gaps = [b.at - a.at for a, b in zip(changes, changes[1:])]
            print(f"streamed 3,000-char answer: {len(calls)} REST calls "
                  f"({sum(c.method == 'POST' and '/messages' in c.path for c in calls)} sends, "
                  f"{sum(c.method == 'PATCH' for c in calls)} edits, "
                  f"{sum(c.path.endswith('/typing') for c in calls)} typing); "
                  f"edit spacing min {min(gaps):.2f} s, median {statistics.median(gaps):.2f} s")


def h_rendered(answer: str) -> list[str]:
    from tests.discord_harness import rendered

    return rendered(answer)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pings", type=int, default=20)
    args = parser.parse_args()
    await overhead(args.pings)
    await streamed()


if __name__ == "__main__":
    asyncio.run(main())
