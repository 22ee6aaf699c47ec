"""Program references: `name@vN` for published programs, `internal:<name>` for the runtime's own.

Owns the grammar of a reference and its parsed form, `ProgramRef`. Pure: parses
text, never looks a program up (that is `loader.ProgramCache`).

- `name` is `[a-z0-9][a-z0-9_-]*`; `N` is a version ≥ 1 without leading zeros.
- `internal:<name>` is reserved for the runtime (e.g. `internal:chat-watch`); it has
  no version and is never fetched from the space.
"""

from __future__ import annotations

import re

import msgspec

INTERNAL_PREFIX = "internal:"
NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
VERSION = re.compile(r"[1-9][0-9]{0,17}")  # N < 10**18: within 64 bits, as the space stores it


class InvalidRef(ValueError):
    """Text that is not a program reference; the message says what is wrong."""


class ProgramRef(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    version: int | None = None  # None only for internal refs
    internal: bool = False

    def __str__(self) -> str:
        if self.internal:
            return f"{INTERNAL_PREFIX}{self.name}"
        return f"{self.name}@v{self.version}"


def parse_ref(text: str) -> ProgramRef:
    """Parse `name@vN` or `internal:<name>`; raise `InvalidRef` naming what is wrong."""
    if not isinstance(text, str):
        raise InvalidRef(f"program ref must be a string, got {type(text).__name__}")
    if text == "":
        raise InvalidRef("program ref is empty; expected `name@vN` or `internal:<name>`")
    if text.startswith(INTERNAL_PREFIX):
        name = _check_name(text[len(INTERNAL_PREFIX) :], text)
        return ProgramRef(name=name, internal=True)
    name, at, version = text.partition("@")
    if not at:
        raise InvalidRef(f"program ref {text!r} has no version; expected `name@vN`")
    return ProgramRef(name=_check_name(name, text), version=_check_version(version, text))


def parse_published(text: str) -> ProgramRef:
    """Parse `name@vN`; an `internal:` ref is refused too, as no program publishes it."""
    ref = parse_ref(text)
    if ref.internal:
        raise InvalidRef(f"{text} is run by the runtime, not a published program")
    return ref


def _check_name(name: str, text: str) -> str:
    if name == "":
        raise InvalidRef(f"program ref {text!r} has an empty name")
    if not NAME.fullmatch(name):
        raise InvalidRef(
            f"program ref {text!r}: name {name!r} must match [a-z0-9][a-z0-9_-]* "
            "(lowercase letters, digits, '_' and '-', no spaces)"
        )
    return name


def _check_version(version: str, text: str) -> int:
    if not version.startswith("v"):
        raise InvalidRef(f"program ref {text!r}: version {version!r} must be `v` then a number")
    digits = version[1:]
    if not VERSION.fullmatch(digits):
        raise InvalidRef(
            f"program ref {text[:80]!r}: version must be v1, v2, … "
            "(N ≥ 1 and below 10^18, no leading zeros)"
        )
    return int(digits)


def is_ref(text: str) -> bool:
    try:
        parse_ref(text)
    except InvalidRef:
        return False
    return True
