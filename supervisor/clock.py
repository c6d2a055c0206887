"""Wall-clock timestamps as they appear on the wire: RFC 3339, UTC, microseconds."""

from __future__ import annotations

import datetime


def timestamp(epoch_seconds: float | None = None) -> str:
    moment = (
        datetime.datetime.now(datetime.UTC)
        if epoch_seconds is None
        else datetime.datetime.fromtimestamp(epoch_seconds, datetime.UTC)
    )
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
