"""The stamp program as a script: what bench/peers.py's subprocess peer runs once per job.

Run: python bench/stamp.py   → one JSON line, `t` the clock `main()` read at entry
"""

import json
import time


def main(args):
    t = time.time()
    return {"ok": True, "t": t}


if __name__ == "__main__":
    print(json.dumps(main({})), flush=True)
