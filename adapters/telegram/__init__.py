"""Telegram, via python-telegram-bot 22: see `adapters.telegram.adapter`.

Modules: `adapter` (lifecycle, inbound dispatch, notices), `updates` (Update → Inbound),
`dispatch` (per-chat ordered processing), `transport` (ChatTransport over PTB, error
translation), `reply` (a run's ReplySink), `approval_cards`, `callbacks` (button presses),
`callback_data` (≤ 64-byte payloads), `pacing` (one-off requests through the outbox),
`bot_info` (getMe for `roost doctor`: privacy mode).
"""

from __future__ import annotations

from adapters.telegram.adapter import TelegramAdapter, TelegramConfigError

__all__ = ["TelegramAdapter", "TelegramConfigError"]
