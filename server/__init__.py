"""The Overtime streaming service: sources in, a learning pipeline per stream, overlays and losses out.

Process layout (frames never pass through the web event loop):

* the API process (``app.py``) serves REST, WebSocket and ``/metrics`` and supervises, per stream,
* a decoder process (``decoder.py``) that turns a source into RGB frames at a fixed rate, written into a
  shared-memory ring (``ring.py``), and
* a learner process (``learner_process.py``) that owns the ``pipeline_core.Pipeline`` and learns on every frame.

They talk to the API process in the messages of ``protocol.py``; ``session.py`` lists the parts of a stream.
"""
