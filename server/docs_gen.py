"""Generate the parts of ``docs/service.md`` that must not drift from the code (``make docs``).

The settings table is rendered from the ``Settings`` model (flag, env var, default, limits, description) and the
endpoint table from ``app.openapi()``; each is written between ``<!-- generated: NAME -->`` and
``<!-- end generated -->`` in ``docs/service.md``, leaving the hand-written text around them alone.
``tests/test_docs.py`` regenerates in memory and fails when the file is out of date. Not used by the service itself.
"""

from __future__ import annotations

import argparse
import re
import sys
import types
import typing
from pathlib import Path

from annotated_types import Ge, Gt, Le, Lt, MultipleOf

from .settings import Settings

ROOT = Path(__file__).resolve().parent.parent
SERVICE_DOC = ROOT / "docs" / "service.md"
END = "<!-- end generated -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Path):
        path = value.resolve() if value.is_absolute() else value
        if path.is_absolute() and path.is_relative_to(ROOT):
            path = path.relative_to(ROOT)  # the checkout's own folder, wherever it lives
        return path.as_posix()
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _num(x: float) -> str:
    return f"{x:g}"


def _limits(metadata: list[object]) -> str:
    parts = []
    for m in metadata:
        if isinstance(m, Ge):
            parts.append(f"≥ {_num(m.ge)}")
        elif isinstance(m, Gt):
            parts.append(f"> {_num(m.gt)}")
        elif isinstance(m, Le):
            parts.append(f"≤ {_num(m.le)}")
        elif isinstance(m, Lt):
            parts.append(f"< {_num(m.lt)}")
        elif isinstance(m, MultipleOf):
            parts.append(f"multiple of {m.multiple_of}")
    return ", ".join(parts)


def _flag(name: str, kind: object) -> str:
    flag = "--" + name.replace("_", "-")
    if kind is bool:
        return f"`{flag}` / `--no-{flag[2:]}`"
    if bool in typing.get_args(kind):
        return f"`{flag} [VALUE]` / `--no-{flag[2:]}`"
    if typing.get_origin(kind) is typing.Literal:
        choices = "\\|".join(typing.get_args(kind))  # a pipe inside a table cell must be escaped
        return f"`{flag} {choices}`"
    if typing.get_origin(kind) is list:
        return f"`{flag} A,B,...`"
    return f"`{flag}`"


def settings_table() -> str:
    """One row per ``Settings`` field, in the model's order (the same flags ``server.cli`` builds)."""
    hints = typing.get_type_hints(Settings)
    prefix = Settings.model_config.get("env_prefix", "")
    rows = [
        "| flag | env var | default | limits | meaning |",
        "|---|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        env = f"`{prefix}{name.upper()}`"
        rows.append(
            f"| {_flag(name, hints[name])} | {env} | `{_cell(_default(field.default))}` | "
            f"{_limits(field.metadata)} | {_cell(field.description or '')} |"
        )
    return "\n".join(rows)


def _summary(op: dict) -> str:
    """The first sentence of the route's docstring, else FastAPI's summary made from the function name."""
    text = " ".join((op.get("description") or "").split())
    if text:
        return text.split(". ")[0].rstrip(".").replace("``", "`")
    return op.get("summary", "")


def _params(op: dict) -> str:
    shown = []
    for p in op.get("parameters", []):
        if p.get("in") != "query":
            continue
        schema = p.get("schema", {})
        choices = schema.get("enum")
        value = "\\|".join(choices) if choices else schema.get("type", "")
        shown.append(f"`?{p['name']}={value}`" + (f" (default `{schema['default']}`)" if "default" in schema else ""))
    content = op.get("requestBody", {}).get("content", {})
    body = content.get("application/json", {}).get("schema", {})
    if "$ref" in body:
        shown.append(f"body `{body['$ref'].rsplit('/', 1)[-1]}`")
    if "application/octet-stream" in content:
        shown.append("body: the file itself")
    return ", ".join(shown)


def endpoints_table() -> str:
    """Every HTTP route of the app, as OpenAPI describes it (with fault injection on, so that route shows too)."""
    from .api.app import create_app

    spec = create_app(Settings(fault_injection=True)).openapi()
    rows = ["| method | path | success | parameters | what |", "|---|---|---|---|---|"]
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            success = next((code for code in op.get("responses", {}) if code.startswith("2")), "")
            what = _summary(op)
            if "faults" in path:
                what += " (only with `--fault-injection`)"
            rows.append(f"| `{method.upper()}` | `{path}` | {success} | {_params(op)} | {_cell(what)} |")
    return "\n".join(rows)


def _type(kind: object) -> str:
    """``int | None``, ``pretrained | scratch | None``, ``list[str] | None``: as a reader of the JSON body sees it."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is type(None):
        return "None"
    if origin is typing.Literal:
        return " | ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type(a) for a in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_type(a) for a in args)}]"
    return getattr(kind, "__name__", str(kind))


def body_table() -> str:
    """The fields of ``POST /api/streams`` (``StreamCreate``): unknown fields are refused (422)."""
    from .api.schemas import StreamCreate

    hints = typing.get_type_hints(StreamCreate)
    rows = ["| field | type | limits | meaning |", "|---|---|---|---|"]
    for name, field in StreamCreate.model_fields.items():
        limits = _limits(field.metadata)
        if name == "source":
            limits = ", ".join(["required", *filter(None, [limits])])
        kind = _cell(_type(hints[name]))
        rows.append(f"| `{name}` | `{kind}` | {_cell(limits)} | {_cell(field.description or '')} |")
    return "\n".join(rows)


SECTIONS = {"settings": settings_table, "endpoints": endpoints_table, "stream-body": body_table}


def render(text: str) -> str:
    """``text`` with every generated section replaced by a fresh rendering; unknown or unclosed markers fail."""
    for name, make in SECTIONS.items():
        pattern = re.compile(rf"(<!-- generated: {name} -->\n)(?:(?:(?!<!--).)*?\n)?({re.escape(END)})", re.S)
        if not pattern.search(text):
            raise ValueError(f"no '<!-- generated: {name} -->' ... '{END}' section")
        body = make()
        text = pattern.sub(lambda m, body=body: m.group(1) + body + "\n" + m.group(2), text, count=1)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server.docs_gen", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is out of date, write nothing")
    parser.add_argument("--path", type=Path, default=SERVICE_DOC)
    args = parser.parse_args(argv)
    old = args.path.read_text(encoding="utf-8")
    new = render(old)
    if args.check:
        if new != old:
            print(f"{args.path} is out of date: run `make docs`", file=sys.stderr)
            return 1
        return 0
    if new != old:
        args.path.write_text(new, encoding="utf-8")
        print(f"rewrote {args.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
