"""Delivery errors a `ChatTransport` raises; platform errors are translated into these.

    DeliveryError                 the request failed (network, server, permissions)
     ├── RateLimited              429 / RetryAfter: nothing happened, retry after `retry_after` s
     ├── FormattingRejected       the platform could not parse the entities: resend as plain text
     ├── MessageTooLong           the text exceeds the platform limit
     ├── MessageGone              the edit/delete target no longer exists (deleted by a user)
     ├── Superseded               a best-effort message was dropped: it would have delayed
     │                            another message of its chat (never sent)
     └── DeliveryUnknown          the request was written but its answer was lost (read
          │                       timeout, connection reset): it MAY have taken effect
          └── DeliveryUndecidable  an earlier attempt may have taken effect and there is no
                                  way to find out: never attempt it again

Every `DeliveryError` except `DeliveryUnknown` means "did not take effect": retrying is
safe. `DeliveryUnknown` on an edit or delete is harmless to retry (both are idempotent);
on a send it must never be retried blindly, or the chat shows the message twice.

Implementers translate with `raise RateLimited(...) from exc`. "Message is not modified"
is NOT an error: a transport returns normally for it.
"""

from __future__ import annotations


class DeliveryError(Exception):
    """A send/edit/delete failed; it did not take effect unless it is `DeliveryUnknown`."""


class RateLimited(DeliveryError):
    """The platform refused the request for flood control; nothing was delivered."""

    def __init__(self, retry_after: float, message: str = "") -> None:
        super().__init__(message or f"rate limited, retry after {retry_after:g} s")
        self.retry_after = max(float(retry_after), 0.0)


class FormattingRejected(DeliveryError):
    """The platform rejected the formatting (e.g. "can't parse entities"); the same text
    without entities is expected to succeed."""


class MessageTooLong(DeliveryError):
    """The text is longer than the platform accepts in one message."""


class MessageGone(DeliveryError):
    """The message to edit or delete does not exist any more."""


class Superseded(DeliveryError):
    """A best-effort message (a "⏳ Got it" notice) was dropped unsent: when its turn came,
    another message of the same chat was waiting, and it would have taken that one's slot."""


class DeliveryUnknown(DeliveryError):
    """The request reached the platform (or may have) but its answer was lost; for a send,
    the message may or may not exist, and its id is unknown."""


class DeliveryUndecidable(DeliveryUnknown):
    """Whether an earlier attempt of a send posted it cannot be found out (e.g. the process
    that could look for it is gone): sending it again could show it twice, so it is not."""
