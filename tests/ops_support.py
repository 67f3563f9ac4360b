"""Shared by the ops tests: where the configs live, how to find the tools that check them, and what metrics and
labels the dashboards and alert rules read (so tests can hold them against a live server's /metrics)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
PROMETHEUS_DIR = DOCKER / "prometheus"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
ALERT_RULES = PROMETHEUS_DIR / "alerts.yml"
ALERT_TESTS = PROMETHEUS_DIR / "alerts_test.yml"
GRAFANA_DIR = DOCKER / "grafana"
DASHBOARDS = sorted((GRAFANA_DIR / "dashboards").glob("*.json"))
COMPOSE = ROOT / "docker-compose.yml"
COMPOSE_GPU = ROOT / "docker-compose.gpu.yml"
COMPOSE_CHECK = ROOT / "docker-compose.check.yml"
PROMETHEUS_DOCKERFILE = PROMETHEUS_DIR / "Dockerfile.debian"
DOCKERFILES = [DOCKER / "Dockerfile", DOCKER / "Dockerfile.cuda"]

# Grafana's variables, replaced by what they expand to so Prometheus itself can run a panel's query.
GRAFANA_VARIABLES = {"$__rate_interval": "5s", "$stream": ".*"}


def find_tool(name: str, install_hint: str) -> str:
    """Path of a checking tool. Missing: a failure under CI (`.ci/run` installs every one), a skip elsewhere."""
    venv_bin = Path(sys.executable).parent / name
    path = str(venv_bin) if venv_bin.exists() else shutil.which(name)
    if path:
        return path
    message = f"{name} not found: {install_hint}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@dataclass(frozen=True)
class Query:
    """One PromQL expression and where it comes from, for error messages."""

    origin: str
    expr: str

    def for_prometheus(self) -> str:
        """The expression with Grafana's variables expanded."""
        expr = self.expr
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        return expr


def dashboard_panels() -> list[tuple[str, dict]]:
    """(dashboard file name, panel) for every panel, rows' nested panels included."""

    def walk(panels: list[dict]) -> Iterator[dict]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))

    return [(path.name, panel) for path in DASHBOARDS for panel in walk(json.loads(path.read_text())["panels"])]


def dashboard_queries() -> list[Query]:
    """Every PromQL expression of every provisioned dashboard panel."""
    return [
        Query(f"{name}: {panel['title']} [{target['refId']}]", target["expr"])
        for name, panel in dashboard_panels()
        for target in panel.get("targets", [])
        if "expr" in target
    ]


def dashboard_variable_queries() -> list[Query]:
    """Grafana template variables' queries, e.g. label_values(metric, label) (Grafana syntax, not PromQL)."""
    queries = []
    for path in DASHBOARDS:
        for variable in json.loads(path.read_text()).get("templating", {}).get("list", []):
            definition = variable.get("definition") or variable.get("query", {}).get("query", "")
            queries.append(Query(f"{path.name}: variable ${variable['name']}", definition))
    return queries


def alert_rules() -> list[dict]:
    return [rule for group in load_yaml(ALERT_RULES)["groups"] for rule in group["rules"] if "alert" in rule]


def alert_queries() -> list[Query]:
    return [Query(f"alerts.yml: {rule['alert']}", rule["expr"]) for rule in alert_rules()]


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_METRIC = re.compile(r"\b(overtime_[a-zA-Z0-9_]+)\b")
_SELECTOR = re.compile(r"\b(overtime_[a-zA-Z0-9_]+)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
_LABEL_VALUES = re.compile(r"label_values\(\s*(overtime_[a-zA-Z0-9_]+)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)")


@dataclass(frozen=True)
class References:
    """The series names an expression reads, the labels it matches per series, and the labels it groups by."""

    metrics: frozenset[str]
    matched: frozenset[tuple[str, str]]
    grouped: frozenset[str]


def references(expr: str) -> References:
    """What an expression reads. All Overtime metrics share the `overtime_` prefix, which keeps this exact enough
    without a PromQL parser; string literals are blanked first so label values cannot look like names."""
    bare = _STRING.sub('""', expr)
    matched = {(metric, label) for metric, body in _SELECTOR.findall(bare) for label in _MATCHER.findall(body)}
    grouped = {label.strip() for labels in _GROUPING.findall(bare) for label in labels.split(",") if label.strip()}
    for metric, label in _LABEL_VALUES.findall(bare):
        matched.add((metric, label))
    return References(frozenset(_METRIC.findall(bare)), frozenset(matched), frozenset(grouped))


def missing_from_exposition(query: Query, exposed: dict[str, set[str]]) -> list[str]:
    """Why `query` would show nothing on a server exposing `exposed`: unknown series, or labels they lack."""
    refs = references(query.expr)
    problems = [f"series {m} is not exposed" for m in sorted(refs.metrics) if m not in exposed]
    problems += [
        f"{m} has no label {label!r} (it has {sorted(exposed[m])})"
        for m, label in sorted(refs.matched)
        if m in exposed and label not in exposed[m]
    ]
    offered = set().union(*(exposed.get(m, set()) for m in refs.metrics))
    problems += [f"no series it reads has label {label!r}" for label in sorted(refs.grouped - offered)]
    return [f"{query.origin}: {problem}" for problem in problems]


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(maxsplit=1)[0].upper(), line.split(maxsplit=1)[1]) for line in lines]
