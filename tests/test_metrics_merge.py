"""``/metrics`` merges the API process's series with every stream's own registry (a stream's work may run in a Ray
actor elsewhere): one family per name, each stream's series under its label, a series two places report summed."""

from __future__ import annotations

from server import errors
from server.api.metrics import ServerMetrics
from server.stream.metrics import StreamMetrics
from testing.metrics import Scrape


def test_every_streams_series_appear_once_under_their_family():
    server, a, b = ServerMetrics(), StreamMetrics("a"), StreamMetrics("b")
    a.frames("processed").inc(3)
    b.frames("processed").inc(5)
    a.step.observe(0.02)
    server.latency.labels("a").observe(0.1)
    server.count_states(["running", "running", "error"])
    text = server.exposition([a.families(), b.families()]).decode()
    scrape = Scrape.parse(text)
    assert scrape.value("overtime_frames_total", stream="a", outcome="processed") == 3
    assert scrape.value("overtime_frames_total", stream="b", outcome="processed") == 5
    assert scrape.value("overtime_step_seconds_count", stream="a") == 1
    assert scrape.value("overtime_latency_seconds_count", stream="a") == 1
    assert scrape.value("overtime_streams", state="running") == 2
    assert text.count("# TYPE overtime_frames_total counter") == 1  # one family, not one per stream


def test_a_series_reported_by_two_places_is_summed_but_not_its_creation_time():
    server, a = ServerMetrics(), StreamMetrics("a")
    a.frames("decoded").inc(2)
    twice = server.exposition([a.families(), a.families()]).decode()
    scrape = Scrape.parse(twice)
    assert scrape.value("overtime_frames_total", stream="a", outcome="decoded") == 4
    created = scrape.matching("overtime_frames_created", stream="a", outcome="decoded")
    assert len(created) == 1 and created[0] == Scrape.parse(server.exposition([a.families()]).decode()).value(
        "overtime_frames_created", stream="a", outcome="decoded"
    )


def test_streams_waiting_for_room_are_counted_from_their_errors():
    server = ServerMetrics()
    room = {"code": errors.WAITING_FOR_ROOM, "message": "…"}
    server.count_waiting_for_room([None, room, {"code": errors.NODE_LOST, "message": "…"}, room])
    assert Scrape.parse(server.exposition([]).decode()).require("overtime_streams_waiting_for_room") == 2
    server.count_waiting_for_room([None])
    assert Scrape.parse(server.exposition([]).decode()).require("overtime_streams_waiting_for_room") == 0
