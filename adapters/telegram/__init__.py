"""Telegram, via python-telegram-bot 22: see `adapters.telegram.adapter`.

Modules: `adapter` (lifecycle, inbound dispatch, notices), `updates` (Update → Inbound),
`dispatch` (per-chat ordered processing), `transport` (ChatTransport over PTB, error
translation), `reply` (a run's ReplySink over `adapters.run_reply`), `approval_cards`
(Telegram's `adapters.cards.CardSender`), `callbacks` (button presses), `callback_data`
(≤ 64-byte payloads), `bot_info` (getMe for `roost doctor`: privacy mode). What Telegram
shares with Discord lives in `adapters/`: `run_reply`, `cards`, `pacing`, `button_actions`.
"""

from __future__ import annotations

from adapters.telegram.adapter import TelegramAdapter, TelegramConfigError

__all__ = ["TelegramAdapter", "TelegramConfigError"]
