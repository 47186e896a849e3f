"""The fake Bot API serves files like Telegram: getFile issues a file_path that downloads
for a limited time, refuses files over the 20 MB bot limit, and answers 404 for any path it
did not issue — PTB's own client against it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from telegram import Bot
from telegram.error import BadRequest

from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, TOKEN, plain_http, tg  # noqa: F401  (fixture)


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    b = Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url, request=plain_http(),
            get_updates_request=plain_http(1))
    async with b:
        yield b


def _file_id(tg: FakeTelegram, data: bytes) -> str:
    tg.send_media(OWNER, OWNER, "document", data, file_name="a.bin", mime_type="application/octet-stream")
    return next(f.file_id for f in tg._world.files.values() if f.data == data)


async def test_a_file_path_downloads_until_it_expires_then_404(tg: FakeTelegram, bot: Bot) -> None:
    now = [1000.0]
    tg._world.file_clock = lambda: now[0]
    file = await bot.get_file(_file_id(tg, b"payload"))
    assert bytes(await file.download_as_bytearray()) == b"payload"
    now[0] += tg._world.file_path_ttl + 1
    async with httpx.AsyncClient() as client:
        resp = await client.get(f"{tg.base_file_url}{TOKEN}/{file.file_path}")
    assert resp.status_code == 404
    fresh = await bot.get_file(file.file_id)  # a new getFile gives a new, valid path
    assert fresh.file_path != file.file_path
    assert bytes(await fresh.download_as_bytearray()) == b"payload"


async def test_paths_never_issued_and_wrong_tokens_are_refused(tg: FakeTelegram, bot: Bot) -> None:
    file = await bot.get_file(_file_id(tg, b"x"))
    async with httpx.AsyncClient() as client:
        guessed = await client.get(f"{tg.base_file_url}{TOKEN}/documents/file_1.bin")
        wrong = await client.get(f"{tg.base_file_url}999:other/{file.file_path}")
    assert (guessed.status_code, wrong.status_code) == (404, 401)
    with pytest.raises(BadRequest, match="(?i)invalid file_id"):
        await bot.get_file("no-such-file")


async def test_getfile_refuses_files_over_the_20_mb_bot_limit(tg: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match="(?i)too big"):
        await bot.get_file(_file_id(tg, b"\0" * (20 * 1024 * 1024 + 1)))
