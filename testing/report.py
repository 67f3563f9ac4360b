"""Results files: everything under ``bench/results/`` (and the browser tests' screenshots) goes through :class:`Run`.

Why one writer: a number is only worth quoting when its file says how it was made. Every markdown and JSON
file starts with the command that produced it, the machine and its load average before and after the run
(the development machine is shared, and a loaded machine makes timings pessimistic); every PNG carries the
same in its text chunks. Nothing under ``bench/results/`` is edited by hand.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"


def command_line(module: str | None = None, args: list[str] | None = None) -> str:
    """The command as a reader would retype it: ``python -m bench.x --flag``, not the interpreter's full path.
    A script whose ``main(argv)`` was called directly (a test) names itself and its arguments."""
    if module is not None:
        return shlex.join(["python", "-m", module, *(args or [])])
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if argv and Path(argv[0]).name.startswith("python"):
        argv[0] = "python"
    return shlex.join(argv)


def load_average() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def machine() -> str:
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return f"{os.cpu_count()} CPUs, {device}, torch {torch.__version__}"


@dataclass
class Run:
    """One benchmark run: started when the script starts measuring, it heads every file the script writes."""

    command: str = field(default_factory=command_line)
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    load_before: list[float] = field(default_factory=load_average)
    machine: str = field(default_factory=machine)
    directory: Path = RESULTS

    def provenance(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "started": self.started,
            "machine": self.machine,
            "load_average_before": self.load_before,
            "load_average_after": load_average(),
        }

    def header(self, title: str) -> str:
        p = self.provenance()
        return (
            f"# {title}\n\n"
            f"Written by `{p['command']}` ({p['started']}); {p['machine']}; load average (1, 5, 15 min) "
            f"{p['load_average_before']} before, {p['load_average_after']} after.\n\n"
        )

    def write(self, stem: str, title: str, markdown: str, data: dict[str, Any]) -> Path:
        """``<stem>.md`` (header, then ``markdown``) and ``<stem>.json`` (provenance, then ``data``)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        md = self.directory / f"{stem}.md"
        md.write_text(self.header(title) + markdown.rstrip("\n") + "\n")
        (self.directory / f"{stem}.json").write_text(json.dumps({**self.provenance(), **data}, indent=2) + "\n")
        write_index(self.directory)
        print(md.read_text())
        return md

    def png(self, name: str, picture: Any) -> Path:
        """Save a matplotlib figure or PNG bytes as ``name``, with the provenance in its text chunks."""
        from PIL import Image, PngImagePlugin

        if isinstance(picture, bytes | bytearray):
            image = Image.open(io.BytesIO(picture))
        else:
            buf = io.BytesIO()
            picture.savefig(buf, format="png", dpi=picture.dpi)
            image = Image.open(buf)
        info = PngImagePlugin.PngInfo()
        for key, value in self.provenance().items():
            info.add_text(key, str(value))
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / name
        image.save(path, pnginfo=info)
        return path


def write_index(directory: Path) -> Path:
    """``README.md`` of a results folder: every results file, its title and how it was made, newest facts first
    from the files themselves (rewritten whenever a benchmark writes, so it never lists what is not there); smoke runs
    (``*-quick``, not committed: ``.gitignore``) left out, so a smoke run does not change what is committed."""
    rows = []
    for md in sorted(p for p in directory.glob("*.md") if p.name != "README.md" and not p.stem.endswith("-quick")):
        lines = md.read_text().splitlines()
        title = lines[0].lstrip("# ").strip() if lines else md.stem
        written = next((line for line in lines[:4] if line.startswith("Written by")), None)
        how = written.split(";")[0].removeprefix("Written by ") if written else "no provenance header"
        rows.append(f"| [{md.name}]({md.name}) | {title} | {how} |")
    index = directory / "README.md"
    index.write_text(
        "# Benchmark results\n\nWritten by `testing.report` each time a benchmark writes its results; every file "
        "below starts with the command that made it, the machine and its load.\n\n| file | what | written by |\n"
        "|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    return index
