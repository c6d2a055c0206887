"""RingLog.Reader.extend: a follower that fell behind takes consecutive chunks at once,
as parts (nothing is copied)."""

from __future__ import annotations

from supervisor.ringlog import Chunk, RingLog


async def test_extend_joins_consecutive_chunks_of_one_stream_up_to_the_limit() -> None:
    log = RingLog(1 << 20)
    for data in (b"aa", b"bb", b"cc"):
        log.offer("stdout", data)
    log.offer("stderr", b"EE")
    log.offer("stdout", b"dd")
    with log.reader(0) as reader:
        first = await reader.next()
        assert isinstance(first, Chunk)
        joined = reader.extend(first, limit=5)  # bb fits (4 bytes), cc would make 6
        assert (joined.start, joined.parts, joined.end) == (0, (b"aa", b"bb"), 4)
        rest = await reader.next()
        assert isinstance(rest, Chunk)
        joined = reader.extend(rest, limit=1 << 20)  # stops at the other stream
        assert (joined.start, joined.parts) == (4, (b"cc",))
        err = await reader.next()
        assert isinstance(err, Chunk) and err.stream == "stderr" and err.start == 6
        last = await reader.next()
        assert isinstance(last, Chunk)
        assert reader.extend(last, 1 << 20).parts == (b"dd",)
        assert await reader.next() is None
