"""`overtime watch STREAM_ID_OR_SOURCE`: follow a stream from the terminal, optionally recording it.

Given a source (a URL, `demo`, `camera:N`, `file:...`, or a video on this machine, which it first sends into the
server's media folder) instead of a stream id, it first creates the stream, and on exit deletes it again, with the
video it sent, unless --keep. Shows one progress line (fps, loss against zero flow's and the frozen start's,
ΔP/ΔS, drops), and above it each change of state, of the frame budget in words, and what the stream did on its own
(went back to its best weights). Saves a video of the overlay, the frame or the flow's colours at the frames' capture
times (--save, H.264 MP4), the flow itself as one Middlebury .flo per frame (--save-flow) and the per-frame metrics
(--csv).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from clients.recording import PICTURES, FlowFiles, MetricsCsv, VideoRecorder, decode_jpeg
from clients.stream_api import ApiError, Frame, StreamApi, error_words

# Exit codes: one per way of failing, so scripts can tell them apart.
OK = 0
USAGE = 2  # argparse's own code for bad arguments
UNREACHABLE = 3  # the server cannot be reached
UNAUTHORISED = 4  # missing or wrong token
REJECTED = 5  # no such stream, or the server refused to create it (bad source, too many streams) or a video sent
STREAM_FAILED = 6  # the stream reported an error state (source unreachable, not video, ...)
NO_FRAMES = 7  # connected, but no message for --idle-timeout seconds
INTERRUPTED = 130

SOURCE_PREFIXES = ("demo", "camera:", "file:", "webcam")
#: The media folder's name the server keeps for its own demo video (``server.stream.source.sources.DEMO_FILE``): a
#: video sent is never named so.
DEMO_NAME = "demo.mp4"


def is_source(arg: str) -> bool:
    return "://" in arg or arg.startswith(SOURCE_PREFIXES)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="overtime watch", description=__doc__.splitlines()[0])
    p.add_argument(
        "target",
        metavar="STREAM_ID_OR_SOURCE",
        help="a stream id, or a source to create a stream from (a video's path here: sent to the server first)",
    )
    p.add_argument("--save", type=Path, metavar="OUT.mp4", help="record a picture as H.264 MP4, at capture times")
    p.add_argument(
        "--picture",
        choices=PICTURES,
        default="overlay",
        help="what --save records (default: overlay); flow is recorded at the learning size",
    )
    p.add_argument("--save-flow", type=Path, metavar="DIR", help="write the flow of each frame as DIR/<frame>.flo")
    p.add_argument("--csv", type=Path, metavar="LOSSES.csv", help="write per-frame metrics as CSV")
    p.add_argument("--url", default=os.environ.get("OVERTIME_URL", "http://127.0.0.1:8000"), help="server base URL")
    p.add_argument("--token", default=os.environ.get("OVERTIME_TOKEN"), help="API token (or $OVERTIME_TOKEN)")
    p.add_argument("--frames", type=int, metavar="N", help="stop after N frames (default: until the stream ends)")
    p.add_argument("--idle-timeout", type=float, default=60.0, metavar="S", help="give up after S s without messages")
    p.add_argument(
        "--keep", action="store_true", help="keep a stream this command created, and a video it sent, when it exits"
    )
    new = p.add_argument_group("new stream (when given a source)")
    new.add_argument("--fps", type=float)
    new.add_argument("--width", type=int)
    new.add_argument("--height", type=int)
    new.add_argument("--stages", type=int)
    new.add_argument("--init", choices=("pretrained", "scratch"), help="a new net's weights (default: the server's)")
    new.add_argument("--lr", type=float)
    new.add_argument("--name")
    new.add_argument("--loop", action="store_true", default=None)
    args = p.parse_args(argv)
    if args.frames is not None and args.frames < 1:
        p.error("--frames must be at least 1")
    if args.target == "webcam":
        p.error("a webcam stream needs a browser to send its frames; use the web client")
    return args


class Progress:
    """One status line, rewritten in place on a terminal and printed about once a second otherwise."""

    def __init__(self, out=None):
        self.out = out or sys.stderr
        self.tty = self.out.isatty()
        self.times: list[float] = []
        self.last_print = 0.0
        self.line_open = False
        self.versus: list[tuple[float, float]] = []  # (loss, frozen start's loss) on the last frames it scored
        self.loss: float | None = None  # the newest frame's loss, and zero flow's, that had one
        self.loss_zero: float | None = None

    def update(self, m: dict) -> None:
        now = time.monotonic()
        self.times = [t for t in self.times if now - t < 3.0] + [now]
        fps = (len(self.times) - 1) / (self.times[-1] - self.times[0]) if len(self.times) > 1 else 0.0
        ratio = m["dp_s"] / m["ds_s"] if m.get("ds_s") else float("nan")
        if m.get("loss") is not None:  # none where the step learned from a pair known nowhere: the last one stands
            self.loss, self.loss_zero = m["loss"], m.get("loss_zero")
        zero = f" (zero flow {self.loss_zero:.4g})" if self.loss_zero is not None else ""
        loss = f"{self.loss:.4g}" if self.loss is not None else "–"
        line = (
            f"frame {m['frame']:>6}  fps {fps:5.1f}  loss {loss}{zero}{self._versus_start(m)}  "
            f"ΔP/ΔS {ratio:4.2f}{' OVER' if ratio > 1 else ''}  drops {m.get('dropped', 0)}"
        )
        if self.tty:
            self.out.write("\r" + line.ljust(78))
            self.out.flush()
            self.line_open = True
        elif now - self.last_print >= 1.0:
            self.out.write(line + "\n")
            self.last_print = now

    def _versus_start(self, m: dict) -> str:
        """The loss over the frozen start's on the last ten frames the start scored (the server's window): what
        learning bought, under 1 where it pays."""
        if (scored := m.get("start_scored")) is not None:
            self.versus = [*self.versus[-9:], (scored["loss"], scored["loss_start"])]
        start = sum(s for _, s in self.versus)
        return f"  vs start {sum(v for v, _ in self.versus) / start:.2f}x" if start > 0 else ""

    def say(self, line: str) -> None:
        """A line of its own (a state change, the budget in words, a note), above the progress line."""
        self.done()
        self.out.write(line + "\n")
        self.out.flush()

    def done(self) -> None:
        if self.line_open:
            self.out.write("\n")
            self.line_open = False


def fail(code: int, message: str) -> int:
    print(f"overtime watch: {message}", file=sys.stderr)
    return code


def api_failure(err: ApiError) -> int:
    if err.status == 0:
        return fail(UNREACHABLE, str(err))
    if err.status in (401, 403):
        return fail(UNAUTHORISED, f"unauthorised: {err} (pass --token or set OVERTIME_TOKEN)")
    return fail(REJECTED, f"{err} (HTTP {err.status})")


def not_a_stream(target: str) -> str:
    """Words for a target the server has no stream of, and is no file on this machine either."""
    return (
        f"the server has no stream {target!r}, and there is no file {target!r} here to send it (a source is a path "
        "to a video on this machine, a URL, demo, camera:N, webcam or file:NAME in the server's media dir)"
    )


def media_name(path: Path) -> str:
    """The name a local video is sent under: its own, with what a media file's name cannot hold as '-'."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", path.name)[-128:].lstrip("._-")
    return name or "video"


def place_video(api: StreamApi, folder: dict, path: Path) -> tuple[str, str | None]:
    """A video on this machine in the server's media folder (the server reads files from there only): its ``file:``
    source, and the name this command sent it under (None where the folder already held it: a video of the same name
    and size, which is played, not sent again). Sent under a name of its own where the folder holds another video of
    that name, so a file someone else sent (and a stream may play) is never replaced."""
    held = {f["name"]: f for f in folder["files"]}
    name, size = media_name(path), path.stat().st_size
    if (there := held.get(name)) and there["size_bytes"] == size:
        told = f"the server has {name} already ({size / 2**20:.1f} MB): playing it, not sending it again"
        print(told, file=sys.stderr)
        return there["source"], None
    name = free_name(name, held)
    print(f"sending {path} ({size / 2**20:.1f} MB) to the server as {name} ...", file=sys.stderr)
    return api.put_media(path, name)["source"], name


def free_name(name: str, taken: Iterable[str]) -> str:
    """``name``, or the first of ``stem-2.ext``, ``stem-3.ext``, ... that ``taken`` (and the server's own demo video)
    leaves free, within a media name's 128 characters."""
    taken = {*taken, DEMO_NAME}
    stem, dot, ext = name.rpartition(".") if "." in name else (name, "", "")
    free, n = name, 1
    while free in taken:
        n += 1
        suffix = f"-{n}{dot}{ext}"
        free = stem[: 128 - len(suffix)] + suffix
    return free


def remove_sent(api: StreamApi, name: str) -> None:
    """Delete the video this command sent (its stream deleted first); where the server keeps it (another stream plays
    it now), say so rather than fail the command over it."""
    try:
        api.delete_media(name)
    except ApiError as err:
        print(f"overtime watch: left {name} in the server's media folder: {err}", file=sys.stderr)


def too_large(folder: dict, path: Path) -> str | None:
    """Words for a video larger than the server takes, asked before sending it: a server that refuses a body midway
    resets the connection, and the client would only see that."""
    size, limit = path.stat().st_size, folder["max_upload_bytes"]
    if size <= limit:
        return None
    return f"{path} is {size / 2**20:.1f} MB; the server takes videos of at most {limit / 2**20:g} MB"


def stream_spec(args: argparse.Namespace) -> dict:
    spec = {"source": args.target}
    for key in ("fps", "width", "height", "stages", "init", "lr", "name", "loop"):
        if getattr(args, key) is not None:
            spec[key] = getattr(args, key)
    return spec


def wanted_images(args: argparse.Namespace) -> list[str]:
    """What to ask the server for: the picture to record, the flow field to save (the overlay for progress only)."""
    return [args.picture] * bool(args.save) + ["flo"] * bool(args.save_flow) or ["overlay"]


def state_words(state: dict) -> str:
    """A stream's state in words: the state, what the stream is doing, and why where an error says. A live source that
    keeps failing only reconnects (no error state): its reason shows only here."""
    phase, error = state.get("phase") or "", error_words(state.get("error"))
    words = f"{phase} ({error})" if phase and error else phase or error
    return f"stream {state.get('state')}{': ' + words if words else ''}"


def budget_gist(message: dict) -> tuple:
    """A budget message's size and words without their measured numbers: a new size or verdict is worth a line, a
    new estimate of a frame's milliseconds is not."""
    return tuple(message["learning_size"]), re.sub(r"\d+(\.\d+)?", "#", message["note"])


def follow(api: StreamApi, stream: dict, args: argparse.Namespace) -> int:
    """Reads frames until --frames, the end of the stream or an error; records what was asked for."""
    video = VideoRecorder(args.save, stream.get("fps") or 10) if args.save else None
    flows = FlowFiles(args.save_flow) if args.save_flow else None
    metrics_csv = MetricsCsv(args.csv) if args.csv else None
    progress = Progress()
    received = 0
    told_budget: tuple | None = None
    try:
        for item in api.frames(stream["id"], idle_timeout=args.idle_timeout, images=wanted_images(args)):
            if not isinstance(item, Frame):
                if item.get("state") == "error" or item.get("type") == "error":
                    progress.done()
                    return fail(STREAM_FAILED, f"stream {stream['id']}: {error_words(item.get('error') or item)}")
                if item.get("state"):
                    progress.say(state_words(item))
                elif item.get("type") == "note":  # what the stream did on its own: went back to its best weights
                    progress.say(f"note: {item['note']}")
                elif item.get("type") == "budget" and (gist := budget_gist(item)) != told_budget:
                    told_budget = gist
                    progress.say(f"budget: {item['note']}")
                continue
            m = item.metrics
            if video is not None:
                if video.container is None and m.get("ds_s"):
                    video.fps = type(video.fps)(1 / m["ds_s"]).limit_denominator(1000)
                video.write(decode_jpeg(item.images[args.picture]), m["capture_time"])
            if flows is not None:
                flows.write(m["frame"], item.images["flo"])
            if metrics_csv is not None:
                metrics_csv.write(m)
            progress.update(m)
            received += 1
            if args.frames is not None and received >= args.frames:
                break
    except TimeoutError:
        progress.done()
        why = f"no frames for {args.idle_timeout:g} s from stream {stream['id']}"
        with contextlib.suppress(ApiError):
            why += f"; {state_words(api.get(stream['id']))}"
        return fail(NO_FRAMES, why)
    finally:
        if video is not None:
            video.close()
        if metrics_csv is not None:
            metrics_csv.close()
    progress.done()
    if args.frames is not None and received < args.frames:
        state = api.get(stream["id"])
        words = error_words(state.get("error"))
        why = f"stream {state.get('state', 'closed')} after {received} of {args.frames} frames"
        return fail(STREAM_FAILED, f"{why}: {words}" if words else why)
    saved = [str(path) for path in (args.save, args.save_flow, args.csv) if path]
    print(f"{received} frames" + (f" -> {', '.join(saved)}" if saved else ""))
    return OK


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    api = StreamApi(args.url, args.token)
    created, sent = False, None  # sent: the media name of a video this command sent
    try:
        local = Path(args.target).expanduser()
        if not is_source(args.target) and local.is_file():
            folder = api.media()
            if words := too_large(folder, local):
                return fail(REJECTED, words)
            args.target, sent = place_video(api, folder, local)
        if is_source(args.target):
            stream = api.create(stream_spec(args))
            created = True
            print(f"created stream {stream['id']} from {stream['source']}", file=sys.stderr)  # as the server shows it
        else:
            stream = api.get(args.target)
        return follow(api, stream, args)
    except ApiError as err:
        if err.status == 404 and not created:
            return fail(REJECTED, not_a_stream(args.target))
        return api_failure(err)
    except KeyboardInterrupt:
        return INTERRUPTED
    finally:
        if created and not args.keep:
            with contextlib.suppress(ApiError):
                api.delete(stream["id"])
        if sent and not args.keep:
            remove_sent(api, sent)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
