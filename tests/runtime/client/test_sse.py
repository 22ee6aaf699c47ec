"""SseEvent: the integer cursor read from an event's id, and its data as JSON."""

import pytest

from runtime.client.sse import SseEvent


@pytest.mark.parametrize(
    ("id", "seq"), [("12", 12), ("0", 0), ("", None), (None, None), ("x1", None), ("-1", None)]
)
def test_seq_is_the_integer_id(id, seq):
    assert SseEvent(id=id, data="").seq == seq


def test_non_ascii_digits_are_not_a_cursor():
    assert SseEvent(id="\u0663", data="").seq is None  # ARABIC-INDIC DIGIT THREE


def test_json_decodes_the_data_or_raises_value_error():
    assert SseEvent(data='{"cursor": 4}').json() == {"cursor": 4}
    with pytest.raises(ValueError):
        SseEvent(data="not json").json()
