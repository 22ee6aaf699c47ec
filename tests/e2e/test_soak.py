"""The soak in CI: a 60-second `bench/soak.py` run must break no invariant.

Three real device processes and a real space server under random SIGKILL, SIGTERM,
SIGSTOP/SIGCONT and pauses (`docs/reliability.md` has the 10-minute figures).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def test_a_minute_of_chaos_breaks_no_invariant() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "bench" / "soak.py"),
        "--seconds",
        "60",
        "--quiet",
        "15",
        "--json",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=240)
    assert out, err.decode()[-3000:]
    result = json.loads(out)
    assert result["invariants"] == dict.fromkeys(result["invariants"], 0), result["examples"]
    assert proc.returncode == 0
    checked = result["checked"]
    assert checked["cron slots checked"] > 0 and checked["messages checked"] > 0, checked
    assert sum(result["acts"].values()) >= 5, result["acts"]
