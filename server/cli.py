"""``overtime``: ``serve`` runs the service (flags mirror ``Settings``), ``watch`` is the command-line viewer."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import typing

from .settings import Settings


def _add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per setting, generated from the model so flags and env vars can never disagree."""
    hints = typing.get_type_hints(Settings)
    for name, field in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        kind = hints[name]
        help_text = f"{field.description} (env OVERTIME_{name.upper()}, default {field.default})"
        if kind is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif bool in typing.get_args(kind):  # a switch that may take a value instead: --allow-private 10.0.0.0/8
            parser.add_argument(flag, dest=name, nargs="?", const=True, default=None, metavar="VALUE", help=help_text)
            parser.add_argument(f"--no-{flag[2:]}", dest=name, action="store_const", const=False, help="(false)")
        elif typing.get_origin(kind) is typing.Literal:
            parser.add_argument(flag, dest=name, default=None, choices=typing.get_args(kind), help=help_text)
        elif typing.get_origin(kind) is list:
            parser.add_argument(flag, dest=name, default=None, type=lambda v: [s for s in v.split(",") if s],
                                metavar="A,B,...", help=help_text)  # fmt: skip
        else:
            convert = next((t for t in typing.get_args(kind) if t is not type(None)), kind)  # X | None -> X
            parser.add_argument(flag, dest=name, default=None, type=convert, help=help_text)


def settings_from(args: argparse.Namespace) -> Settings:
    """The flags given win; everything else comes from ``OVERTIME_*`` env vars or the defaults."""
    return Settings(**{name: getattr(args, name) for name in Settings.model_fields if getattr(args, name) is not None})


def _exit_normally(signum: int, frame: object) -> None:
    """SIGTERM ends the server as Ctrl-C does. uvicorn shuts down gracefully on it (streams stop, learners
    checkpoint), then raises it again; left at its default action, that kills the process before the interpreter's
    exit, and multiprocessing's temporary folder (the fork server's socket) stays behind in /tmp."""
    raise SystemExit(0)


def serve(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if not settings.ray_address:  # on a cluster the streams' processes start on their nodes
        from .stream import fork_server

        fork_server.start()  # its preload imports torch while this process does the same for the API

    import uvicorn

    from .api.app import create_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _exit_normally)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="overtime", description="Video that learns optical flow while it plays.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="run the service")
    _add_setting_flags(serve_parser)
    commands.add_parser("watch", help="watch a stream in the terminal (see `overtime watch --help`)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["watch"]:
        from clients.watch import main as watch_main  # the viewer pulls in nothing of the server

        return watch_main(argv[1:])
    return serve(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
