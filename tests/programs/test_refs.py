import pytest

from programs.refs import InvalidRef, ProgramRef, is_ref, parse_ref


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("triage@v1", ProgramRef(name="triage", version=1)),
        ("a@v10", ProgramRef(name="a", version=10)),
        ("0x_y-z@v123", ProgramRef(name="0x_y-z", version=123)),
        ("internal:chat-watch", ProgramRef(name="chat-watch", internal=True)),
    ],
)
def test_parse_valid(text: str, ref: ProgramRef) -> None:
    assert parse_ref(text) == ref
    assert str(parse_ref(text)) == text
    assert is_ref(text)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("triage", "no version"),
        ("triage@v0", "N ≥ 1"),
        ("triage@v01", "no leading zeros"),
        ("triage@1", "must be `v` then a number"),
        ("triage@v", "v1, v2"),
        ("triage@vx", "v1, v2"),
        ("@v1", "empty name"),
        ("Triage@v1", "[a-z0-9]"),
        ("tri age@v1", "no spaces"),
        (" triage@v1", "no spaces"),
        ("_x@v1", "[a-z0-9][a-z0-9_-]*"),
        ("a@b@v1", "must be `v`"),
        ("internal:", "empty name"),
        ("internal:Chat", "[a-z0-9]"),
        ("internal:x@v1", "[a-z0-9]"),
    ],
)
def test_parse_invalid(text: str, says: str) -> None:
    with pytest.raises(InvalidRef) as exc:
        parse_ref(text)
    assert says in str(exc.value)
    assert isinstance(exc.value, ValueError)
    assert not is_ref(text)


def test_not_a_string() -> None:
    with pytest.raises(InvalidRef, match="must be a string"):
        parse_ref(3)  # type: ignore[arg-type]


def test_ref_is_frozen_and_hashable() -> None:
    ref = parse_ref("x@v2")
    assert {ref: 1}[ProgramRef(name="x", version=2)] == 1
    with pytest.raises(AttributeError):
        ref.name = "y"  # type: ignore[misc]
