"""How a ``bench.cluster`` run reads against its targets: the limits it is held to and the results table
(``cluster.md``, ``cluster-quick.md``); the scenario itself is ``bench/cluster.py``."""

from __future__ import annotations

RECOVERY_LIMIT_S = 60.0  # a lost node's stream runs again within this
GAP_LIMIT_S = 2.0  # the other stream's viewer never waits longer for a frame


def markdown(r: dict) -> str:
    """The targets table of a run's result ``r`` (``bench.cluster.scenario``'s dict)."""
    lost, restart = r["node_loss"], r["api_restart"]
    yes = lambda v: "yes" if v else "no"  # noqa: E731
    lines = [
        "| target | measured | met |",
        "|---|---|---|",
        f"| two streams on different nodes | {', '.join(r['placement']['nodes'])} | "
        f"{yes(r['placement']['different'])} |",
        f"| a lost node's stream runs again elsewhere within {RECOVERY_LIMIT_S:g} s, with its weights | "
        f"{lost['recovered_s']} s, on {lost['now_on']}, resumed from frame {lost['resumed_from']} | "
        f"{yes(lost['recovered_s'] <= RECOVERY_LIMIT_S and (lost['resumed_from'] or 0) > 0)} |",
        f"| the other stream's viewer waits at most {GAP_LIMIT_S:g} s for a frame | "
        f"{lost['other_viewer_longest_gap_s']} s | {yes(lost['other_viewer_longest_gap_s'] <= GAP_LIMIT_S)} |",
        f"| the API answers every request meanwhile | {lost['api']['requests'] - lost['api']['unanswered']} of "
        f"{lost['api']['requests']}, slowest {lost['api']['slowest_s']} s | {yes(lost['api']['unanswered'] == 0)} |",
        f"| after the API was killed and started again: every stream listed, viewable, none restarted | listed "
        f"{yes(restart['listed'])}, viewable {yes(restart['viewable'])}, same processes "
        f"{yes(restart['same_processes'])}, counters went on {yes(restart['counters_went_on'])} "
        f"({restart['seconds']} s) | {yes(restart['met'])} |",
    ]
    if r.get("no_room"):
        room = r["no_room"]
        lines.append(
            f"| a lost stream that no node has room for says it waits for room, and /metrics count it; a node added, "
            f"it runs there from its checkpoint | {room['lost']['waiting']} waiting "
            f"({room['lost']['error']['code']}); then on {room['room']['node']}, resumed from frame "
            f"{room['room']['resumed_from']}, {room['room']['waiting']} waiting | {yes(room['met'])} |"
        )
    if r.get("node_added"):
        added = r["node_added"]
        lines.append(
            f"| a node added takes new streams | node {added['added']} joined; the next stream ran on "
            f"{added['ran_on']} | {yes(added['met'])} |"
        )
    gone = r["deleted"]
    lines.append(
        f"| a deleted stream's actor ends as a process should: gone from Ray and the list, no process of it left, "
        f"its temporary folder removed | answer {gone['answer']}, actor gone {yes(gone['actor_gone'])}, listed "
        f"{yes(gone['listed'])}, processes left {gone['processes_left']}, folder left {yes(gone['folder_left'])} | "
        f"{yes(gone['met'])} |"
    )
    left = r["shared_memory_left"]
    lines.append(
        f"| nothing of the cluster left in /dev/shm after it stopped (a lost node's frame rings and semaphores go with "
        f"it, as a machine's memory does) | {len(left)} entries left | {yes(not left)} |"
    )
    if r.get("rate"):
        ray_fps, single = r["rate"]["ray"]["fps"], r["rate"]["single_machine"]["fps"]
        size = r["rate"]["ray"]["learning_size"]
        lines.append(
            f"| through Ray, the single machine's frame rate at the same size within 5 % | "
            f"{ray_fps:.2f} vs {single:.2f} frames/s at {size['width']}×{size['height']}, ratio "
            f"{r['rate']['ratio']:.3f} | {yes(r['rate']['ratio'] >= 0.95)} |"
        )
        lines += [
            "",
            f"Frame rates over {r['rate']['ray']['seconds']:g} s each, one after the other (Ray first): a "
            "ratio above 1 is this machine's noise, not Ray being faster.",
        ]
    return "\n".join(lines) + "\n"
