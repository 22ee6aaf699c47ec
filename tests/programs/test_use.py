import subprocess
import sys
import threading

import pytest

from programs.context import RunContext
from programs.use import (
    CAPABILITIES,
    InvalidCapabilitySpec,
    UnknownCapability,
    known,
    make_use,
    register,
)

CTX = RunContext(
    run_id="run_1",
    trigger_id="trg_1",
    program="triage@v1",
    peer="laptop",
    space="bao",
    url="http://127.0.0.1:1",
    token="tok",
)


class Echo:
    made = 0

    def __init__(self, ctx: RunContext) -> None:
        Echo.made += 1
        self.ctx = ctx
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def echo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(CAPABILITIES, "echo", {})
    register("echo", 2, Echo)
    Echo.made = 0


def test_any_v1_is_registered() -> None:
    assert "any@v1" in known()
    assert 1 in CAPABILITIES["any"]


def test_use_makes_one_instance_per_run(echo: None) -> None:
    use = make_use(CTX)
    first = use("echo@v2")
    assert isinstance(first, Echo)
    assert first.ctx is CTX
    assert use("echo@v2") is first
    other = make_use(CTX)("echo@v2")
    assert other is not first
    assert Echo.made == 2


def test_use_close_closes_instances(echo: None) -> None:
    use = make_use(CTX)
    made = use("echo@v2")
    use.close()
    assert made.closed
    assert use("echo@v2") is not made


def test_use_is_thread_safe(echo: None) -> None:
    use = make_use(CTX)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(use("echo@v2"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(got) == 8
    assert len({id(g) for g in got}) == 1


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("nope@v1", "no capability 'nope@v1'; known: any@v1, echo@v2"),
        ("any@v9", "no capability 'any@v9'; known: any@v1, echo@v2"),
        ("echo@v1", "known: any@v1, echo@v2"),
    ],
)
def test_use_unknown(echo: None, spec: str, says: str) -> None:
    with pytest.raises(UnknownCapability) as exc:
        make_use(CTX)(spec)
    assert says in str(exc.value)
    assert isinstance(exc.value, LookupError)


@pytest.mark.parametrize("spec", ["any", "any@1", "", "ANY@v1", "any@v0", "internal:any"])
def test_use_malformed(spec: str) -> None:
    with pytest.raises(InvalidCapabilitySpec) as exc:
        make_use(CTX)(spec)
    assert "'name@vN'" in str(exc.value)
    assert isinstance(exc.value, ValueError)


def test_register_refuses_bad_names() -> None:
    with pytest.raises(InvalidCapabilitySpec):
        register("Bad Name", 1, Echo)
    with pytest.raises(InvalidCapabilitySpec):
        register("ok", 0, Echo)


def test_any_v1_factory_builds_the_space_client() -> None:
    anyv1 = pytest.importorskip("programs.anyv1")
    use = make_use(CTX)
    client = use("any@v1")
    try:
        assert isinstance(client, anyv1.AnyV1)
        assert use("any@v1") is client
    finally:
        use.close()


def test_module_imports_no_capability_code() -> None:
    code = "import sys, programs.use; print('programs.anyv1' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "False", out.stderr
