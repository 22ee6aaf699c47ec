"""`use()`: the capabilities a program may ask for by name and major version.

Owns the registry `CAPABILITIES` (name → major → factory) and `make_use`, which
builds the `use` placed in a program's globals for one run. `use("any@v1")` gives
the space client scoped to the run's token; instances are made once per run and
closed with it. Asking for anything else names what exists.

Factories import their implementation lazily, so this module loads (and the
registry can be inspected) without importing any capability's code. It must not
talk to the space itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from programs.context import RunContext
from programs.refs import InvalidRef, ProgramRef, parse_published

Factory = Callable[[RunContext], Any]
CAPABILITIES: dict[str, dict[int, Factory]] = {}


class UnknownCapability(LookupError):
    """`use()` of a capability or version that does not exist; names the ones that do."""


class InvalidCapabilitySpec(ValueError):
    """`use()` of text that is not `name@vN`."""


def register(name: str, major: int, factory: Factory) -> None:
    """Make `factory(ctx)` the implementation of `name@v{major}`."""
    spec = f"{name}@v{major}"
    ref = _parse(spec)
    CAPABILITIES.setdefault(ref.name, {})[major] = factory


def known() -> list[str]:
    return sorted(f"{name}@v{major}" for name, majors in CAPABILITIES.items() for major in majors)


def resolve(spec: str) -> Factory:
    """The factory for `spec`; `UnknownCapability` or `InvalidCapabilitySpec` if none."""
    ref = _parse(spec)
    factory = CAPABILITIES.get(ref.name, {}).get(ref.version or 0)
    if factory is None:
        raise UnknownCapability(f"no capability {spec!r}; known: {', '.join(known()) or 'none'}")
    return factory


def _parse(spec: str) -> ProgramRef:
    try:
        return parse_published(spec)
    except InvalidRef as exc:
        raise InvalidCapabilitySpec(f"use() takes 'name@vN', e.g. 'any@v1': {exc}") from None


class Use:
    """The `use` of one run: resolves a spec and keeps one instance per spec."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self._instances: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, spec: str) -> Any:
        factory = resolve(spec)
        with self._lock:
            if spec not in self._instances:
                self._instances[spec] = factory(self.ctx)
            return self._instances[spec]

    def close(self) -> None:
        """Close every instance made for this run that can be closed."""
        with self._lock:
            instances, self._instances = list(self._instances.values()), {}
        for instance in instances:
            close = getattr(instance, "close", None)
            if callable(close):
                close()


def make_use(ctx: RunContext) -> Use:
    return Use(ctx)


def _any_v1(ctx: RunContext) -> Any:
    from programs.anyv1 import AnyV1

    return AnyV1(ctx)


register("any", 1, _any_v1)
