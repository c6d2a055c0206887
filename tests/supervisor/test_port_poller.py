"""The socket-table poller's pace, in trio's virtual time (each test takes pytest-trio's
`autojump_clock`), so counting reads over a second is exact and instant: the reads themselves
are real sock_diag queries."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from supervisor.ports import (
    FAST_INTERVAL,
    MAX_WAIT_INTERVAL,
    SLOW_INTERVAL,
    ListenerWatch,
    wait_interval,
)

from .serving import serving


@pytest.fixture
async def watch() -> AsyncIterator[ListenerWatch]:
    watch = ListenerWatch()
    async with serving(watch.serve):
        yield watch


async def reads_during(watch: ListenerWatch, seconds: float) -> int:
    before = watch.queries
    await trio.sleep(seconds)
    return watch.queries - before


def test_interval_grows_with_the_age_of_the_wait() -> None:
    assert wait_interval(0) == FAST_INTERVAL
    assert wait_interval(0.05) == FAST_INTERVAL
    assert wait_interval(0.5) == pytest.approx(0.01)
    assert wait_interval(60) == MAX_WAIT_INTERVAL


@pytest.mark.parametrize(
    ("fast", "after", "interval"),
    [
        pytest.param(True, 0, FAST_INTERVAL, id="a young readiness wait: every 2 ms"),
        pytest.param(True, 1.5, MAX_WAIT_INTERVAL, id="a long readiness wait: backed off"),
        pytest.param(False, 0, SLOW_INTERVAL, id="watch streams alone: slowly"),
    ],
)
async def test_pace(
    watch: ListenerWatch,
    autojump_clock: trio.testing.MockClock,
    fast: bool,
    after: float,
    interval: float,
) -> None:
    """Reads over a window of 50 intervals, `after` seconds into the subscription."""
    with watch.subscribe(fast=fast):
        await trio.sleep(after)
        assert await reads_during(watch, 50 * interval) == pytest.approx(50, abs=2)


async def test_a_new_wait_beside_an_old_one_is_polled_at_its_own_pace(
    watch: ListenerWatch, autojump_clock: trio.testing.MockClock
) -> None:
    with watch.subscribe(fast=True):
        await trio.sleep(1.5)
        with watch.subscribe(fast=True):
            # The old wait alone would allow one read in these 10 ms at most.
            assert await reads_during(watch, 0.01) >= 0.01 / FAST_INTERVAL


async def test_nobody_subscribed_means_no_reads(
    watch: ListenerWatch, autojump_clock: trio.testing.MockClock
) -> None:
    with watch.subscribe(fast=True):
        await trio.sleep(0.1)
    assert await reads_during(watch, 10) <= 1  # at most the read already scheduled
