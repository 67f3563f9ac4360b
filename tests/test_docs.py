"""The docs cannot drift from the code: the generated tables of docs/service.md match the code, the `fast` net's layer
list in docs/models.md is the code's, and every relative link in README.md, docs/ and docs/notebook/ points at a file
(and a heading or anchor) that exists, as does every docs anchor the code names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from models.flow_nets import build_flow_net
from server import docs_gen
from server.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "docs" / "notebook"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(NOTEBOOK.glob("*.md"))]
CODE = [p for d in ("models", "server", "pipeline_core", "bench", "clients", "testing", "tests") for p in
        sorted((ROOT / d).rglob("*.py"))]  # fmt: skip


def test_service_doc_is_up_to_date() -> None:
    text = docs_gen.SERVICE_DOC.read_text(encoding="utf-8")
    assert docs_gen.render(text) == text, "docs/service.md is out of date with the code: run `make docs`"


def test_generated_tables_cover_the_code() -> None:
    settings = docs_gen.settings_table()
    for name in Settings.model_fields:
        assert f"`OVERTIME_{name.upper()}`" in settings
    endpoints = docs_gen.endpoints_table()
    for path in ("/api/streams", "/api/streams/{stream_id}/flow", "/healthz", "/readyz", "/metrics"):
        assert f"`{path}`" in endpoints


def test_render_refuses_a_missing_section() -> None:
    with pytest.raises(ValueError, match="generated: settings"):
        docs_gen.render("no markers here\n")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_exist(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'src="([^"]+)"', text)
    missing = []
    for target in targets:
        if re.match(r"[a-z]+:", target):
            continue
        name, _, anchor = target.partition("#")
        path = (doc.parent / name).resolve() if name else doc
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
            missing.append(target)
    assert not missing, f"{doc.name} links to missing files or anchors: {missing}"


def test_the_docs_anchors_the_code_names_exist() -> None:
    """Code comments point readers at sections of the docs (``docs/models.md#the-still-gate-follows-the-camera``)."""
    named = r"\b(models|operations|service|engine|schedules)\.md#([a-z0-9-]+)"
    missing = []
    for path in CODE:
        for doc, anchor in re.findall(named, path.read_text(encoding="utf-8")):
            if anchor not in anchors(ROOT / "docs" / f"{doc}.md"):
                missing.append(f"{path.relative_to(ROOT)}: {doc}.md#{anchor}")
    assert not missing, missing


def test_the_notebook_index_lists_every_entry() -> None:
    index = (NOTEBOOK / "README.md").read_text(encoding="utf-8")
    entries = sorted(p.name for p in NOTEBOOK.glob("*.md") if p.name != "README.md")
    assert entries and all(re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md", e) for e in entries), entries
    assert re.findall(r"\]\((\d{4}-[^)]+\.md)\)", index) == entries, "one line per entry, in date order"


def test_the_fast_nets_layers_in_the_docs_are_the_codes() -> None:
    """docs/models.md's table of the `fast` net's layers, and its picture, name the code's layers in order."""
    code = [type(layer).__name__ for layer in build_flow_net("fast", init="scratch")]
    text = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
    section = text[text.index("## The `fast` net, layer by layer") :]
    table = section[section.index("<!-- layers of fast:") :].split("\n\n", 1)[0]
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \|", table, re.MULTILINE)
    assert [int(i) for i, _ in rows] == list(range(len(rows))), "rows numbered 0, 1, 2, ... in order"
    assert [name for _, name in rows] == code
    picture = section.split("```", 2)[1]
    drawn = sorted((int(i), name) for i, name in re.findall(r"\b(\d+) ([A-Z]\w+)", picture))
    assert drawn == list(enumerate(code)), "the picture names every layer once, by its index"


def anchors(doc: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings (lower case, punctuation dropped, spaces as hyphens, a repeat
    numbered), and those written as ``<a id="...">``."""
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.DOTALL)
    found: set[str] = set(re.findall(r'<a (?:id|name)="([^"]+)"', text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found
