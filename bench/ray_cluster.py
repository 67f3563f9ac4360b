"""The multi-node Ray cluster of the tests, timed: each scenario of ``testing.ray_scenarios`` run ``--repeat`` times,
each run in a network namespace of its own (root needed). How long a head and a worker node take to start, how soon
Ray notices a killed node, how soon that node's actor answers from the survivor, the longest wait of an actor on the
survivor meanwhile, and how long the cluster takes to stop. Writes ``bench/results/ray-cluster.json`` and ``.md``.

    python -m bench.ray_cluster              # every scenario 3 times
    python -m bench.ray_cluster --repeat 5 --scenario node-loss
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from testing import netns
from testing.ray_scenarios import SCENARIOS
from testing.report import Run

TIMINGS = ["head_start_s", "node_start_s", "noticed_s", "back_s", "bystander_max_wait_s", "shutdown_s", "total_s"]


def run_once(name: str, directory: Path) -> dict[str, Any]:
    out = directory / f"{name}.json"
    proc = netns.run_module("testing.ray_scenarios", name, "--out", str(out), timeout_s=300)
    if proc.returncode != 0:
        return {"ok": False, "error": proc.stderr[-2000:]}
    result = json.loads(out.read_text())
    return {"ok": not result["leftover_processes"], **{k: result[k] for k in TIMINGS if k in result}}


def table(runs: dict[str, list[dict[str, Any]]]) -> str:
    rows = ["| scenario | timing | runs | min | median | max |", "|---|---|---|---|---|---|"]
    for name, results in runs.items():
        for key in TIMINGS:
            values = [r[key] for r in results if key in r]
            if values:
                rows.append(f"| {name} | {key} | {len(values)} | {min(values):.2f} | "
                            f"{statistics.median(values):.2f} | {max(values):.2f} |")  # fmt: skip
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scenario", choices=list(SCENARIOS), action="append", help="default: all")
    args = parser.parse_args(argv)
    available, reason = netns.namespace_available()
    if not available:
        parser.exit(1, f"bench.ray_cluster: {reason}\n")
    run = Run()
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="overtime-ray-bench-") as tmp:
        for _ in range(args.repeat):
            for name in args.scenario or SCENARIOS:
                runs.setdefault(name, []).append(run_once(name, Path(tmp)))
    failed = {name: [r for r in results if not r["ok"]] for name, results in runs.items()}
    failed = {name: results for name, results in failed.items() if results}
    markdown = (
        "Two nodes (head and one worker, 1 CPU and 100 MiB of object store each), separate `ray start --block` "
        "processes on 127.0.0.1 in a network namespace of their own; health checks every 0.5 s, a node dead after "
        "5 failed ones (`testing.ray_cluster.FAST_FAILURE_DETECTION`). Seconds.\n\n"
        + table(runs)
        + (f"\n\nFailed runs: {json.dumps(failed)}\n" if failed else "\n\nEvery run succeeded and left no process.\n")
    )
    run.write("ray-cluster", "A multi-node Ray cluster on one machine", markdown, {"runs": runs})
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
