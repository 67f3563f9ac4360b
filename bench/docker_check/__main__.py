"""``python -m bench.docker_check`` (``make docker-check``): every step in order, the cleanup, and the results."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

import bench.docker_check
from bench.docker_check.base_image import ensure_base
from bench.docker_check.build import build, image_facts
from bench.docker_check.checks import run_stack
from bench.docker_check.engine import ensure_engine
from bench.docker_check.report import not_run, report
from bench.docker_check.repository import (
    COMPOSE_FILES,
    DOCKERFILE,
    IMAGE,
    PROMETHEUS_DOCKERFILE,
    PROMETHEUS_IMAGE,
    ROOT,
    WORK,
    dockerfile_facts,
)
from bench.docker_check.shell import CheckFailed, docker, image_exists, log
from bench.docker_check.stack import Stack
from bench.docker_check.wheelhouse import ensure_wheelhouse, serve_wheelhouse
from testing.report import Run, command_line


def main(argv: list[str] | None = None) -> int:
    """Run the check; 0 when every check held and the results are written, 1 (with the reason) otherwise."""
    argv = sys.argv[1:] if argv is None else argv
    description = bench.docker_check.__doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m bench.docker_check", description=description)
    parser.add_argument("--watch", type=float, default=60.0, help="seconds the WebSocket viewer watches the demo")
    parser.add_argument("--no-cache", action="store_true", help="build without Docker's layer cache")
    parser.add_argument("--cold", action="store_true",
                        help="as on a fresh machine: remake the base image (if an earlier run made it) and the "
                        "wheelhouse, and build with --no-cache")  # fmt: skip
    args = parser.parse_args(argv)
    args.no_cache |= args.cold
    run, t0 = Run(command=command_line("bench.docker_check", argv)), time.monotonic()
    result: dict = {"args": vars(args)}
    WORK.mkdir(parents=True, exist_ok=True)
    stack: Stack | None = None
    try:
        result["engine"] = ensure_engine()
        if args.cold:  # the images this check builds go first, so that their layers go with them
            for tag in (IMAGE, PROMETHEUS_IMAGE):
                if image_exists(tag):
                    docker("image", "rm", tag)
        result["base"] = ensure_base(dockerfile_facts(DOCKERFILE)["FROM"], args.cold)
        result["wheelhouse"] = ensure_wheelhouse(args.cold)
        with serve_wheelhouse() as index:
            pip_args = {"TORCH_INDEX": index, "PIP_INDEX_URL": index}
            result["build"] = build(DOCKERFILE, IMAGE, ROOT, pip_args, args.no_cache)
        result["image"] = image_facts()
        log(f"{IMAGE}: {result['image']['size_mb']} MB, built in {result['build']['seconds']} s")
        result["prometheus_build"] = build(PROMETHEUS_DOCKERFILE, PROMETHEUS_IMAGE, PROMETHEUS_DOCKERFILE.parent, {},
                                           args.no_cache)  # fmt: skip
        stack = Stack()
        result["compose"] = stack.version()
        result["ports"] = {"overtime": stack.port, "prometheus": stack.prometheus_port}
        result["scrape_config"] = str(stack.scrape_config.relative_to(ROOT))
        result |= run_stack(stack, args.watch)
    except (CheckFailed, TimeoutError) as exc:
        print(f"\ndocker-check FAILED: {exc}", file=sys.stderr)
        if stack is not None:
            print(f"\nlast lines of the containers' logs:\n{stack.logs()}", file=sys.stderr)
        return 1
    finally:
        if stack is not None:
            (WORK / "compose.log").write_text(stack.logs(2000))
            with contextlib.suppress(CheckFailed):
                stack("down", "-v", "--remove-orphans")
    result["not_run"] = not_run(COMPOSE_FILES[0])
    result["total_s"] = round(time.monotonic() - t0, 1)
    run.write("docker", "Container check: the CPU image built and run for real (make docker-check)", report(result),
              result)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
