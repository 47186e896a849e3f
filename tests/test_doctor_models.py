"""`roost doctor` asks the models endpoint (the real SDK against the fake's GET /v1/models)
about each configured model id: one clear line each — exists, unknown, key rejected — with no
traceback and no secret; `/model` lists what the endpoint offers."""

from __future__ import annotations

from pathlib import Path

from bot.doctor import Check, run_checks
from bot.settings import Settings
from tests.fakes.anthropic_api import FakeAnthropic

KEY = "sk-ant-secret-key-123"


async def model_checks(tmp_path: Path, fake: FakeAnthropic, key: str) -> list[Check]:
    settings = Settings(
        home=tmp_path / "home", anthropic_api_key=key, anthropic_base_url=fake.base_url,
        agent={"model": "claude-sonnet-5-5", "fallback_models": ["claude-nonsense-9"]},
    )  # fmt: skip
    return [c for c in await run_checks(settings) if c.name.startswith("model id ")]


async def test_doctor_says_exists_or_unknown_for_each_configured_model(tmp_path: Path) -> None:
    with FakeAnthropic(api_key=KEY) as fake:
        known, unknown = await model_checks(tmp_path, fake, KEY)
    assert known.name == "model id claude-sonnet-5-5" and known.status == "ok"
    assert known.detail.startswith("exists") and "1,000,000" in known.detail
    assert unknown.name == "model id claude-nonsense-9" and unknown.status == "fail"
    assert unknown.detail.startswith("unknown to http://127.0.0.1") and "ROOST_AGENT__FALLBACK_MODELS" in unknown.fix


async def test_doctor_says_key_rejected_once_per_model_without_the_key(tmp_path: Path) -> None:
    with FakeAnthropic(api_key="the-right-one") as fake:
        checks = await model_checks(tmp_path, fake, KEY)
    assert [c.status for c in checks] == ["fail", "fail"]
    assert all(c.detail.startswith("key rejected") for c in checks)
    text = " ".join(c.detail + c.fix for c in checks)
    assert KEY not in text and "Traceback" not in text


async def test_doctor_names_an_unreachable_endpoint_without_a_traceback(tmp_path: Path) -> None:
    fake = FakeAnthropic().start()
    fake.close()
    settings = Settings(home=tmp_path / "home", anthropic_api_key=KEY, anthropic_base_url="http://127.0.0.1:9")
    checks = [c for c in await run_checks(settings) if c.name.startswith("model id ")]
    assert len(checks) == 1 and checks[0].status == "warn" and "could not ask" in checks[0].detail
    assert KEY not in checks[0].detail


async def test_model_command_lists_what_the_endpoint_offers(tmp_path: Path, fake_api: FakeAnthropic) -> None:
    from tests.app_harness import OWNER_ID, running_app
    from tests.fakes.recording_adapter import private

    async with running_app(tmp_path, fake_api) as (app, adapter):
        await adapter.say(private(OWNER_ID, "/model"))
        listing = adapter.notices[-1][1]
    assert "Current model: claude-test" in listing
    offered = next(line for line in listing.splitlines() if line.startswith("The endpoint offers: "))
    assert "claude-sonnet-5-5" in offered and "claude-opus-4-8" in offered
    assert any(r.path == "/v1/models" for r in fake_api.requests)
    # claude-test (the harness's model) is not in the fake's catalogue: said so.
    assert "Configured but not offered by the endpoint: claude-test" in listing
