"""The one toolkit the tests and the benchmarks share: a real server on loopback, its API client, /metrics parsed,
WebSocket viewers, live sources, generated media and the results writer.

Why one package: a server started two ways, or /metrics parsed two ways, is two answers to the same question that
can drift apart. Not part of the service's wheel (see pyproject.toml); importable from the repository root.
"""
