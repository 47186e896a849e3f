"""How long a user waits when the model fails, over the wire (real SDK, fake Messages API).

Run: .venv/bin/python bench/bench_failover.py [--runs 5]
Scenarios, each with the default RetryPolicy (2 retries, 1 s base, full jitter) and real
sleeps, next to the same scenario with an injected sleep (what the tests use):
- 529 three times, then the fallback answers (retries spent, breaker opens);
- the breaker already open: straight to the fallback;
- 429 with retry-after 2 s, then the same model answers;
- a stream that stalls after some text (stall limit 1 s), continued on retry.
Then the continuation path's own latency, p50 from the stall being detected to the first new
visible text: with a prefill, with the no-prefill user turn today's models need, and with a
model that restarts its answer (the repeat is held back and dropped before anything shows).
Also the per-request overhead of FailoverLLM over a bare AnthropicLLM on a healthy model.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_core.anthropic_llm import AnthropicLLM  # noqa: E402
from agent_core.breaker import Breakers  # noqa: E402
from agent_core.failover import FailoverLLM  # noqa: E402
from agent_core.continuation import CONTINUE_PROMPT  # noqa: E402
from agent_core.llm import LLMClient, LLMRequest, LLMStalled, StreamItem, TextChunk  # noqa: E402
from agent_core.models import ModelFacts, ModelTable  # noqa: E402
from agent_core.retry import RetryPolicy  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropic  # noqa: E402
from tests.fakes.anthropic_models import FakeModel  # noqa: E402
from tests.fakes.anthropic_script import Error, Reply, Stall, Text, reply_text  # noqa: E402

PRIMARY, BACKUP = "claude-primary", "claude-backup"


async def no_sleep(_: float) -> None:
    return None


async def timed(llm: LLMClient) -> tuple[float, str]:
    request = LLMRequest(PRIMARY, [], [], [{"role": "user", "content": "hi"}], 64)
    start = time.perf_counter()
    text = "".join([i.text async for i in llm.stream(request) if isinstance(i, TextChunk)])
    return time.perf_counter() - start, text


async def scenario(fake: FakeAnthropic, name: str, responses: list, *, real: bool, stall_s: float = 60.0,
                   open_breaker: bool = False) -> float:  # fmt: skip
    fake.reset()
    fake.script(*responses)
    fake.responder = lambda body: reply_text("the answer, continued")
    inner = AnthropicLLM(api_key="k", base_url=fake.base_url, stall_timeout_s=stall_s)
    breakers = Breakers()
    if open_breaker:
        for _ in range(3):
            permit = breakers.for_model(PRIMARY).acquire()
            assert permit is not None
            permit.failure("overloaded")
    llm = FailoverLLM(inner, [BACKUP], retry=RetryPolicy(), breakers=breakers,
                      **({} if real else {"sleep": no_sleep}))  # fmt: skip
    try:
        elapsed, _ = await timed(llm)
    finally:
        await inner.aclose()
    return elapsed


ANSWER = "The capital of France is Paris, a city on the Seine known for its museums and cafes."
SHOWN = ANSWER[:24]


class _MarksStalls:
    """The inner client, noting when a stall is detected."""

    def __init__(self, inner: AnthropicLLM) -> None:
        self.inner = inner
        self.stalled_at: float | None = None

    async def stream(self, request: LLMRequest):  # noqa: ANN201
        try:
            async for item in self.inner.stream(request):
                yield item
        except LLMStalled:
            self.stalled_at = time.perf_counter()
            raise


def _continuing(restart: bool):  # noqa: ANN202
    def respond(body: dict) -> Reply:
        last = body["messages"][-1]
        asked = last["role"] == "user" and any(b.get("text") == CONTINUE_PROMPT for b in last["content"])
        if restart or not (asked or last["role"] == "assistant"):
            return reply_text(ANSWER, chunk_size=8)
        return reply_text(ANSWER[len(SHOWN.rstrip()):], chunk_size=8)

    return respond


async def continuation_latency(fake: FakeAnthropic, *, prefill: bool, restart: bool, runs: int) -> float:
    fake.models[PRIMARY] = FakeModel(PRIMARY, PRIMARY, prefill=prefill)
    samples = []
    for _ in range(runs):
        fake.reset()
        fake.script(Reply(Text(SHOWN, chunk_size=8), Stall(None)))
        fake.responder = _continuing(restart)
        inner = _MarksStalls(AnthropicLLM(api_key="k", base_url=fake.base_url, stall_timeout_s=0.3))
        llm = FailoverLLM(inner, [], retry=RetryPolicy(), breakers=Breakers(), sleep=no_sleep,
                          facts=ModelTable({PRIMARY: ModelFacts(prefill=prefill)}))  # fmt: skip
        request = LLMRequest(PRIMARY, [], [], [{"role": "user", "content": "capital of France?"}], 64)
        first_new: float | None = None
        text = ""
        try:
            async for item in llm.stream(request):
                if isinstance(item, TextChunk):
                    text += item.text
                    if first_new is None and inner.stalled_at is not None:
                        first_new = time.perf_counter()
        finally:
            await inner.inner.aclose()
        assert text == ANSWER, text
        assert first_new is not None and inner.stalled_at is not None
        samples.append(first_new - inner.stalled_at)
    return statistics.median(samples)


async def main(runs: int) -> None:
    with FakeAnthropic() as fake:
        cases = [
            ("529 x3 then fallback", lambda: [Error(529)] * 3, {}),
            ("breaker open: straight to fallback", lambda: [], {"open_breaker": True}),
            ("429 retry-after 2 s then answer", lambda: [Error(429, retry_after=2)], {}),
            ("stall after text (limit 1 s), continued", lambda: [Reply(Text("the answer, "), Stall(None))],
             {"stall_s": 1.0}),
        ]  # fmt: skip
        print(f"{'scenario':44} {'real sleep':>12} {'injected':>10}  (median of {runs})")
        for name, responses, options in cases:
            real = [await scenario(fake, name, responses(), real=True, **options) for _ in range(runs)]
            fake_clock = [await scenario(fake, name, responses(), real=False, **options) for _ in range(runs)]
            print(f"{name:44} {statistics.median(real):>10.2f} s {statistics.median(fake_clock):>8.3f} s")
        print(f"continuation path, stall detected -> first new visible text (p50 of {runs * 4}):")
        for label, prefill, restart in (
            ("prefill (models that accept it)", True, False),
            ("no prefill: a user turn asks to continue", False, False),
            ("no prefill, the model restarts its answer", False, True),
        ):
            p50 = await continuation_latency(fake, prefill=prefill, restart=restart, runs=runs * 4)
            print(f"  {label:44} {p50 * 1000:8.1f} ms")
        fake.reset()
        fake.responder = lambda body: reply_text("ok")
        bare = AnthropicLLM(api_key="k", base_url=fake.base_url)
        wrapped = FailoverLLM(bare, [BACKUP], breakers=Breakers())
        try:
            for llm in (bare, wrapped):  # warm up the connection pool
                await timed(llm)
            b = statistics.median([(await timed(bare))[0] for _ in range(50)])
            w = statistics.median([(await timed(wrapped))[0] for _ in range(50)])
        finally:
            await bare.aclose()
        print(f"healthy request: bare {b * 1000:.2f} ms, through FailoverLLM {w * 1000:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    logging.disable(logging.WARNING)  # the retries' and breakers' log lines are expected here
    asyncio.run(main(parser.parse_args().runs))
