"""Output tails and the end-of-run marker that splits a worker's pipe into runs."""

from __future__ import annotations

import pytest

from programs.tail import Channel, Tail, keep_head, keep_tail

MARK = b"\0end:42\0"


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"hello", MARK], "hello"),
        ([b"hello" + MARK], "hello"),
        ([b"hel", b"lo\0en", b"d:4", b"2\0"], "hello"),  # the marker split across reads
        ([b"\0", b"\0end:42\0"], "\0"),  # a false start just before the marker
        ([MARK], ""),
    ],
)
def test_a_run_ends_at_its_marker(chunks: list[bytes], expected: str) -> None:
    channel = Channel()
    tail = channel.begin(MARK)
    for chunk in chunks:
        channel.feed(chunk)
    assert channel.done.is_set()
    assert tail.text() == expected


def test_bytes_after_the_marker_are_not_the_runs_and_eof_ends_it() -> None:
    channel = Channel()
    first = channel.begin(MARK)
    channel.feed(b"one" + MARK + b"stray")
    second = channel.begin(b"\0end:43\0")
    channel.feed(b"two\0en")
    assert not channel.done.is_set()
    channel.eof()
    assert channel.done.is_set()
    assert (first.text(), second.text()) == ("one", "two\0en")


def test_a_closed_channel_ends_new_runs_at_once() -> None:
    channel = Channel()
    channel.eof()
    assert channel.begin(MARK) is not None and channel.done.is_set()


def test_a_tail_keeps_the_last_bytes_with_a_marker() -> None:
    tail = Tail(limit=4)
    tail.feed(b"abc")
    assert tail.text() == "abc"
    tail.feed(b"defg")
    assert tail.text() == "…[truncated 3 bytes]\ndefg"


def test_text_helpers_cap_head_and_tail() -> None:
    assert keep_head(b"abcdef", limit=4) == "abcd…[truncated 2 bytes]"
    assert keep_head(b"abc", limit=4) == "abc"
    assert keep_tail("abcdef", limit=4) == "…[truncated 2 bytes]\ncdef"
    assert keep_tail("abc", limit=4) == "abc"
