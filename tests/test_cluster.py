"""The service on a real Ray cluster on this machine (``bench.cluster --quick``): a head and two worker nodes
(separate raylets on 127.0.0.1) in a network namespace of the test's own, a real ``overtime serve --ray-address``.
Skipped with the reason where no namespace can be made (root and ``unshare`` needed). About 1.5 minutes on 2 cores.
The same run loses the survivor too, when no node has room for its stream (part 5 of ``bench.cluster``).
"""

from __future__ import annotations

import json

import pytest

from bench import cluster
from testing import netns

AVAILABLE, REASON = netns.namespace_available()


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("cluster")
    assert cluster.main(["--quick", "--out-dir", str(out)]) == 0
    return json.loads((out / "cluster-quick.json").read_text())


pytestmark = [
    pytest.mark.realtime,
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.skipif(not AVAILABLE, reason=REASON or "-"),
]


def test_two_streams_started_one_after_the_other_run_on_different_nodes(result):
    assert result["placement"]["different"], result["placement"]
    assert result["addresses"] == ["127.0.0.1"], "every node on loopback"


def test_a_lost_nodes_stream_runs_again_elsewhere_with_its_weights_and_nobody_else_notices(result):
    lost = result["node_loss"]
    assert lost["now_on"] != lost["killed"] and lost["recovered_s"] <= cluster.RECOVERY_LIMIT_S, lost
    assert lost["resumed_from"] > 0, "the stream came back without its weights"
    assert lost["other_viewer_longest_gap_s"] <= cluster.GAP_LIMIT_S, lost
    assert lost["api"]["unanswered"] == 0 and lost["api"]["requests"] > 10, lost["api"]


def test_an_api_process_started_again_serves_every_stream_without_restarting_any(result):
    restart = result["api_restart"]
    assert restart["listed"] and restart["viewable"], restart
    assert restart["same_processes"] and restart["counters_went_on"], restart


def test_a_deleted_streams_actor_ends_as_a_process_should(result):
    """Ended, not killed: its exit handlers remove its temporary folder, and Ray does not start it again."""
    gone = result["deleted"]
    assert gone["answer"] == 204 and gone["actor_gone"] and not gone["listed"], gone
    assert gone["processes_left"] == 0 and not gone["folder_left"], gone


def test_the_cluster_leaves_no_shared_memory_behind(result):
    """The lost node's frame rings and semaphores go with it (here the nodes share one machine's /dev/shm), the
    deleted streams' are released, and no stream is left running when the cluster stops."""
    assert result["shared_memory_left"] == [], result["shared_memory_left"]


@pytest.fixture(scope="module")
def no_room(result) -> dict:
    return result["no_room"]


def test_a_lost_stream_that_no_node_has_room_for_says_it_waits_for_room_and_metrics_count_it(no_room):
    """Not "it resumes on another node" for ever: what it needs, what the cluster has free; then, a node added, it
    runs there from its checkpoint and the count is back to 0."""
    assert no_room["before"]["waiting"] == 0, no_room
    lost = no_room["lost"]
    assert lost["state"] == "reconnecting" and lost["error"]["code"] == "waiting_for_room", lost
    assert "needs 1 CPU on one node" in lost["error"]["message"], lost
    assert "the cluster has 0 CPUs free" in lost["error"]["message"], lost
    assert lost["waiting"] == 1 and lost["reconnecting"] == 1, lost
    back = no_room["room"]
    assert back["state"] == "running" and back["moved"] and back["resumed_from"] > 0, back
    assert back["waiting"] == 0, back
