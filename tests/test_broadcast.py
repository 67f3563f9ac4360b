"""Viewer fan-out: a slow viewer gets only the newest frame, drops are counted, notices are never dropped."""

from __future__ import annotations

import asyncio

from server.api.broadcast import Broadcaster


def test_slow_viewer_gets_newest_frame_and_drops_are_counted():
    async def run() -> None:
        drops, counts, wanted = [], [], []
        hub = Broadcaster(
            on_drop=lambda: drops.append(1), on_count=lambda n, kinds: (counts.append(n), wanted.append(kinds))
        )
        fast, slow = hub.join(["frame", "flow"]), hub.join(["overlay"])
        assert counts == [1, 2] and wanted == [{"frame", "flow"}, {"frame", "flow", "overlay"}]
        for i in range(3):
            hub.frame(i)
            assert await fast.next() == ("frame", i)  # the fast viewer keeps up
        assert await slow.next() == ("frame", 2)  # the slow one skipped 0 and 1
        assert len(drops) == 2
        hub.notice({"type": "state", "state": "ended"})
        hub.frame(3)
        assert await slow.next() == ("notice", {"type": "state", "state": "ended"})
        assert await slow.next() == ("frame", 3)
        assert [await fast.next(), await fast.next()] == [("notice", {"type": "state", "state": "ended"}), ("frame", 3)]
        waiting = asyncio.create_task(fast.next())
        await asyncio.sleep(0.01)
        assert not waiting.done()  # nothing new: the viewer waits instead of spinning
        hub.frame(4)
        assert await asyncio.wait_for(waiting, 1) == ("frame", 4)
        hub.leave(fast)
        assert counts[-1] == 1 and wanted[-1] == {"overlay"}  # the worker stops rendering what nobody watches

    asyncio.run(run())
