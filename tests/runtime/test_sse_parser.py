"""The per-connection SSE parser: wire-format table tests (WHATWG HTML §9.2)."""

import pytest

from runtime.sse import EventTooLarge, SseEvent, SseParser


def parse(*chunks: bytes) -> list[SseEvent]:
    parser = SseParser()
    return [event for chunk in chunks for event in parser.feed(chunk)]


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"data: a\n\n"], [SseEvent(data="a")]),
        ([b"data: a\r\n\r\n"], [SseEvent(data="a")]),
        ([b"data: a\r\rdata: b\r\r"], [SseEvent(data="a"), SseEvent(data="b")]),
        ([b"data: a\r", b"\n\r", b"\n"], [SseEvent(data="a")]),  # CRLF split across chunks
        ([b"\xef\xbb\xbfdata: bom\n\n"], [SseEvent(data="bom")]),
        ([b"data: 1\ndata: 2\n\n"], [SseEvent(data="1\n2")]),
        ([b"data:  two spaces\n\n"], [SseEvent(data=" two spaces")]),
        ([b"data\n\n"], [SseEvent(data="")]),
        ([b": ping\n\n"], []),
        ([b"event: hello\nid: 7\ndata: {}\n\n"], [SseEvent(event="hello", id="7", data="{}")]),
        ([b"id: 3\n\n"], []),  # no data: nothing dispatched
        ([b"id: a\0b\ndata: x\n\n"], [SseEvent(data="x")]),  # NUL in id: ignored
        ([b"retry: 10\ndata: x\n\n"], [SseEvent(data="x")]),
        ([b"da", b"ta: sp", b"lit\n", b"\n"], [SseEvent(data="split")]),
        (["data: \u00e9\n\n".encode()[:7], "data: \u00e9\n\n".encode()[7:]], [SseEvent(data="é")]),
        ([b"data: \xff\n\n"], [SseEvent(data="\ufffd")]),
        ([b"event: zzz\ndata: partial\n"], []),  # incomplete at the end: never dispatched
    ],
)
def test_wire_format(chunks, expected):
    assert parse(*chunks) == expected


def test_id_belongs_to_its_own_event_only():
    events = parse(b"id: 5\ndata: a\n\nevent: gap\ndata: {}\n\n")
    assert [e.id for e in events] == ["5", None]
    assert [e.seq for e in events] == [5, None]


@pytest.mark.parametrize(("id", "seq"), [("12", 12), ("", None), ("x1", None), ("-1", None)])
def test_seq_is_the_integer_id(id, seq):
    assert SseEvent(id=id, data="").seq == seq


def test_oversized_event_is_refused():
    parser = SseParser(max_chars=10)
    with pytest.raises(EventTooLarge):
        parser.feed(b"data: 0123456789abc\n")


def test_oversized_unfinished_line_is_refused():
    parser = SseParser(max_chars=10)
    with pytest.raises(EventTooLarge):
        parser.feed(b"data: 0123456789abc")
