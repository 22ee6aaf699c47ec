"""A wake to re-read from a stream's cursor is queued once until taken: a burst, one read."""

from __future__ import annotations

from aiohttp.test_utils import make_mocked_request

from space.streams import EventStream, Fanout


async def test_nudges_before_the_stream_takes_one_queue_one() -> None:
    stream = EventStream(make_mocked_request("GET", "/"))
    fanout: Fanout[str] = Fanout()
    fanout.add("home", stream)
    assert all(fanout.nudge("home", None) == 1 for _ in range(100))
    assert stream._queue.qsize() == 1
    assert await stream.__anext__() is None  # taken: the stream reads now
    assert fanout.nudge("home", None) == 1 and stream._queue.qsize() == 1  # queued again
    stream.push(("message",))  # an item pushed after the nudge is taken after it
    assert await stream.__anext__() is None and await stream.__anext__() == ("message",)
    assert fanout.nudge("other", None) == 0 and fanout.keys() == ["home"]
    stream.close()
    assert not stream.nudge(None)  # a closed stream takes nothing
