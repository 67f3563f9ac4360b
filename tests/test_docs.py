"""The docs cannot drift from the code: the generated tables of docs/service.md match the code, and every relative
link in README.md and docs/ points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from server import docs_gen
from server.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


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
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{doc.name} links to missing files: {missing}"
