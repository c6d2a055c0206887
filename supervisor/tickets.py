"""Tickets: short-lived credentials for one terminal, for browsers.

Browsers cannot set headers on a WebSocket, and a token in a URL leaks into logs and
history. A controller that holds the token asks for a ticket (`terminal.ticket`) and hands
it to the page. A ticket is `EXPIRY.MAC`: an HMAC of the terminal id and the expiry under a
key that lives only in this daemon's memory, so it opens one terminal, for a while, and dies
with the daemon.
"""

from __future__ import annotations

import hmac
import secrets
import time


class Tickets:
    """Issues and checks tickets for resources (terminal ids)."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def issue(self, resource: str, ttl: float) -> tuple[str, int]:
        expires = int(time.time() + ttl)
        return f"{expires}.{self._mac(resource, expires)}", expires

    def check(self, ticket: str, resource: str) -> bool:
        expires, _, mac = ticket.partition(".")
        if not expires.isdigit() or int(expires) < time.time():
            return False
        return hmac.compare_digest(mac, self._mac(resource, int(expires)))

    def _mac(self, resource: str, expires: int) -> str:
        message = f"{resource}\n{expires}".encode()
        return hmac.new(self._key, message, "sha256").hexdigest()[:32]
