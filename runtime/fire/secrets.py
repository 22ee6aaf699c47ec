"""A device's secrets: `{"secret": "NAME"}` values in a record's `args`, resolved here.

Owns reading the device's own secrets file (a JSON object of names to values,
owner-only like a token file; re-read when it changes) and replacing each
`{"secret": "NAME"}` in a run's args, at any depth, by its value, on the device
that runs the fire, just before the run. The space stores only the reference. A
name the file lacks (or no file) is a `SecretMissing`: the run ends `error` saying
which, and nothing runs. Must not log or send a secret's value.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

SECRETS_FILE = "secrets.json"  # in the device's data directory
Args = dict[str, Any]  # a program's args, as JSON


class SecretMissing(ValueError):
    """A secret a run's args name that this device cannot give; the message names it."""


def is_ref(value: object) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("secret"), str)


def has_refs(value: object) -> bool:
    if is_ref(value):
        return True
    if isinstance(value, dict):
        return any(has_refs(v) for v in value.values())
    if isinstance(value, list):
        return any(has_refs(v) for v in value)
    return False


class Secrets:
    """The secrets file of one device (None: it has none)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) of what is loaded
        self._values: dict[str, str] = {}

    def resolve(self, args: Args) -> Args:
        """`args` with each `{"secret": NAME}` replaced by its value (`args` itself if none)."""
        if not has_refs(args):
            return args
        values = self._load()
        resolved: Args = self._replace(args, values)
        return resolved

    def _replace(self, value: Any, values: dict[str, str]) -> Any:
        if is_ref(value):
            name = value["secret"]
            if name not in values:
                where = self.path if self.path is not None else "(this device has none)"
                raise SecretMissing(f"secret {name!r} is not in this device's secrets file {where}")
            return values[name]
        if isinstance(value, dict):
            return {k: self._replace(v, values) for k, v in value.items()}
        if isinstance(value, list):
            return [self._replace(v, values) for v in value]
        return value

    def _load(self) -> dict[str, str]:
        if self.path is None:
            return {}
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return {}
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise SecretMissing(
                f"secrets file {self.path} is accessible by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):04o}); run `chmod 600 {self.path}`"
            )
        if self._seen != (st.st_mtime_ns, st.st_size):
            self._values, self._seen = self._read(), (st.st_mtime_ns, st.st_size)
        return self._values

    def _read(self) -> dict[str, str]:
        assert self.path is not None
        try:
            found = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise SecretMissing(f"secrets file {self.path} is not a JSON object: {exc}") from None
        if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
            raise SecretMissing(f"secrets file {self.path}: must map names to strings")
        return {str(k): v for k, v in found.items()}


def default_path(data: Path) -> Path:
    return Path(os.path.join(data, SECRETS_FILE))
