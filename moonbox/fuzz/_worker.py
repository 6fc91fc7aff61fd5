"""The fuzzer's worker process: runs programs and answers with the violations it saw.

Started by :class:`moonbox.fuzz._runner.Worker` as ``python -m moonbox.fuzz._worker``
(``--isolate``: each program also runs through an isolated sandbox, whose worker process is
this one's child). It reads one JSON request per line on stdin (``{"source": ...,
"profile": ..., "kind": ...}``) and writes one JSON answer per line (``{"violations": [...],
"status": ..., "elapsed_s": ..., "rss_bytes": ...}``). A crash of the VM kills only this process; the driver sees the pipe
close and knows which program it had sent.

The answers go to a copy of the original stdout; file descriptor 1 itself is pointed at
stderr, so nothing a library writes to stdout can break the protocol.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import psutil

from ._invariants import Checker


def serve(jit: bool, wall_s: float, margin_s: float, isolate: bool = False) -> None:
    """Answer requests until stdin closes."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    process = psutil.Process()
    checker = Checker(jit=jit, wall_s=wall_s, margin_s=margin_s, isolate=isolate)
    out.write(json.dumps({"ready": True, "rss_bytes": process.memory_info().rss}) + "\n")
    out.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        result = checker.check(request["source"], request["profile"],
                               request.get("kind", "composed"))
        answer = {
            "violations": [v.to_dict() for v in result.violations],
            "status": result.status,
            "elapsed_s": result.elapsed_s,
            "rss_bytes": process.memory_info().rss,
        }
        out.write(json.dumps(answer) + "\n")
        out.flush()
    checker.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m moonbox.fuzz._worker")
    parser.add_argument("--no-jit", action="store_true")
    parser.add_argument("--wall-s", type=float, required=True)
    parser.add_argument("--margin-s", type=float, required=True)
    parser.add_argument("--isolate", action="store_true")
    args = parser.parse_args()
    serve(not args.no_jit, args.wall_s, args.margin_s, args.isolate)


if __name__ == "__main__":
    main()
