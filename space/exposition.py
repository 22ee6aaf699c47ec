"""The Prometheus text format 0.0.4, as `/metrics` writes it: numbers, label sets, families.

Owns how a sample line and a family (its `# HELP` and `# TYPE`) are spelled, and the
escaping of label values. Pure text: must not read a table or the app.
"""

from __future__ import annotations

from collections.abc import Iterable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def labels(pairs: dict[str, str], **more: str) -> str:
    """`{a="1",b="2"}` sorted by name; '' for none."""
    merged = {**pairs, **more}
    if not merged:
        return ""
    inner = ",".join(f'{k}="{escape(str(v))}"' for k, v in sorted(merged.items()))
    return "{" + inner + "}"


def escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def line(name: str, pairs: dict[str, str], value: float) -> str:
    return f"{name}{labels(pairs)} {num(value)}"


def family(name: str, kind: str, help_text: str, samples: Iterable[str]) -> list[str]:
    help_text = help_text.replace("\\", r"\\").replace("\n", r"\n")
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]
