"""The Overtime streaming service: sources in, a learning pipeline per stream, overlays and losses out.

The folders are the architecture (frames never pass through the web event loop):

* ``api/``: the API process: REST, WebSocket and ``/metrics`` (``app.py``, ``routes/``), the streams it serves;
* ``stream/``: a stream's work: its supervisor runs, per generation, a decoder process (``source/``) that turns a
  source into RGB frames at a fixed rate, written into a shared-memory ring (``ring.py``), and a learner process
  (``learner/``) that owns the ``pipeline_core.Pipeline`` and learns on every frame; they report in the messages
  of ``protocol.py``;
* ``placement/``: where a stream learns (which GPU).
"""
