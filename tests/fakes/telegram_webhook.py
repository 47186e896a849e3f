"""Webhook delivery for the fake Bot API (mixed into FakeTelegram).

While a webhook is set, every new update is POSTed as JSON to its URL, one at a time in
order, with ``X-Telegram-Bot-Api-Secret-Token`` when a secret was set. Each POST is
recorded in ``webhook_responses``; a failed POST is recorded (and shown in
getWebhookInfo's ``last_error_*``) and, by default, not retried; after
``retry_failed_webhooks(after_s)`` it is POSTed again until answered 2xx, later updates
waiting behind it, as Telegram does. If the webhook is deleted before an update is posted,
the update goes back to the getUpdates queue.
"""

from __future__ import annotations

import asyncio
import copy
import time
from types import EllipsisType

import aiohttp

from tests.fakes.telegram_inspect import InspectMixin
from tests.fakes.telegram_state import JSON, WebhookDelivery


class WebhookMixin(InspectMixin):
    """Needs the server loop, an HTTP session and a queue on that loop (from FakeTelegram)."""

    _loop: asyncio.AbstractEventLoop | None
    _http: aiohttp.ClientSession | None
    _hook_queue: asyncio.Queue[tuple[JSON, str | None]] | None
    _hook_retry_s: float | None = None
    _hook_route: str | None = None

    def route_webhook(self, url: str | None) -> None:
        """A load balancer in front of several webhook servers (replicas): updates made from
        now on are POSTed to ``url`` instead of the URL setWebhook set (None: back to it)."""
        with self._cond:
            self._hook_route = url

    def retry_failed_webhooks(self, after_s: float | None) -> None:
        """POST an update again ``after_s`` after a failed POST (no answer or not 2xx), until
        it succeeds or the webhook changes, as Telegram does; None: never retry."""
        with self._cond:
            self._hook_retry_s = after_s

    def _deliver(self, update: JSON, *, forced: bool = False) -> None:
        raise NotImplementedError

    def _to_webhook(self, update: JSON) -> None:
        if self._loop is not None and self._hook_queue is not None:
            item = (copy.deepcopy(update), self._hook_route)
            self._loop.call_soon_threadsafe(self._hook_queue.put_nowait, item)

    async def _webhook_worker(self) -> None:
        assert self._hook_queue is not None
        while True:
            update, route = await self._hook_queue.get()
            with self._cond:
                hook = copy.copy(self._world.webhook)
                if not hook.url:  # webhook removed meanwhile: back to getUpdates
                    self._deliver(update)
                    continue
                if route is not None:
                    hook.url = route
            status = await self._post(update, hook.url, hook.secret_token)
            while status is None or not 200 <= status < 300:
                with self._cond:
                    retry_s = self._hook_retry_s
                    same = self._world.webhook.url == hook.url
                if retry_s is None or not same:
                    break
                await asyncio.sleep(retry_s)  # timing-ok: Telegram's back-off before a retry
                status = await self._post(update, hook.url, hook.secret_token)

    async def _post(self, update: JSON, url: str, secret: str | None) -> int | None:
        assert self._http is not None
        headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret is not None else {}
        status: int | None = None
        error: str | None = None
        try:
            async with self._http.post(url, json=update, headers=headers) as resp:
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        with self._cond:
            uid = update.get("update_id")
            self._webhook_log.append(
                WebhookDelivery(
                    uid if isinstance(uid, int) else None,
                    url,
                    secret,
                    status,
                    time.monotonic(),
                    error,
                )
            )
            if status is None or not 200 <= status < 300:
                self._world.webhook.last_error_date = int(time.time())
                self._world.webhook.last_error_message = (
                    error or f"Wrong response from the webhook: {status}"
                )
            self._changed()
        return status

    # ---- webhook posting from tests ------------------------------------------------------
    async def apost_to_webhook(
        self, update: JSON | int, *, secret: str | EllipsisType | None = ..., url: str | None = None
    ) -> int | None:
        """POST an update (or a known update_id) to the webhook URL (or ``url``).

        ``secret``: ``...`` (default) sends the configured secret, None sends no header, a
        string sends that. Returns the HTTP status (None if the connection failed); the
        POST is recorded in ``webhook_responses``.
        """
        with self._cond:
            body = copy.deepcopy(
                self._world.delivered[update] if isinstance(update, int) else update
            )
            target = url or self._world.webhook.url
            token = self._world.webhook.secret_token if secret is ... else secret
        if not target or self._loop is None:
            raise ValueError("no webhook is set and no url given")
        future = asyncio.run_coroutine_threadsafe(self._post(body, target, token), self._loop)
        return await asyncio.wrap_future(future)

    def post_to_webhook(
        self, update: JSON | int, *, secret: str | EllipsisType | None = ..., url: str | None = None
    ) -> int | None:
        """Blocking ``apost_to_webhook``; not from an event loop thread (it could be the receiver's)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.apost_to_webhook(update, secret=secret, url=url))
        raise RuntimeError(
            "post_to_webhook() would block this event loop; use 'await tg.apost_to_webhook(...)'"
        )
