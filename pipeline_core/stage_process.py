"""A stage's own process under the process runtime (``processes.py``), and the pipe protocol.

The controller starts :func:`stage_process_main` once per stage; the process joins the stages' gloo
group, reports ready, then answers the controller's commands (``step``, ``state_dict``, ``set_lr``,
...) in order until ``close``. Commands and answers are pickled with :func:`dumps`: cloudpickle, so
lambdas and closures (a ``loss_fn`` written inline) reach the workers by value, and plain CPU tensors
travel as numpy arrays.

A worker ends when its controller is gone: its pipe closes, or, for a worker forked from the controller (which then
holds copies of the pipes' other ends, so no pipe closes), its parent changes.
"""

from __future__ import annotations

import faulthandler
import io
import os
import pickle
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist
from torch import Tensor

from .dist_transport import DistTransport
from .interpreter import Message
from .partition import TensorMeta
from .schedules import StepActions
from .worker import StageWorker, prepare_process, settle_process

#: How often a worker waiting for a command looks whether its parent is still there.
PARENT_POLL_S = 1.0
#: A worker still setting up after this long prints its threads' stacks: where it hangs, in the log (a start takes a
#: second or less; the controller gives up at ``processes.START_TIMEOUT``).
SLOW_START_S = 30.0


# -- messages over the pipes --------------------------------------------------------------------
class _Pickler(cloudpickle.Pickler):
    """Plain CPU tensors travel as numpy arrays: ~10x cheaper than torch's own pickling, and no
    shared memory (torch.multiprocessing's default), so a worker's weights are never aliased.
    Everything else as cloudpickle does it (functions without an importable name by value)."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is Tensor and obj.device.type == "cpu" and obj.dtype in _NUMPY_DTYPES:
            return torch.from_numpy, (obj.detach().resolve_conj().resolve_neg().numpy(),)
        return super().reducer_override(obj)


_NUMPY_DTYPES = {torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8}
_NUMPY_DTYPES |= {torch.uint8, torch.bool}


def dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def send(conn: Connection, obj: Any) -> None:
    conn.send_bytes(dumps(obj))


def recv(conn: Connection) -> Any:
    return pickle.loads(conn.recv_bytes())


def describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(exc)).strip()


# -- the stage process -------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerSpec:
    stage: int
    depth: int
    payload: bytes  # dumps((stage, loss_fn))
    input_meta: TensorMeta
    output_meta: TensorMeta
    threads: int
    slots: int
    timeout: float


def stage_process_main(spec: WorkerSpec, conn: Connection) -> None:
    """Entry point of a worker: set up, report ready, then serve commands until told to close."""
    prepare_process(spec.threads)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # workers of one machine talk over loopback
    faulthandler.dump_traceback_later(SLOW_START_S)
    try:
        stage, loss_fn = pickle.loads(spec.payload)
        port = _rendezvous_port(conn, spec.timeout)
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=spec.timeout))
        dist.init_process_group(
            "gloo", store=store, rank=spec.stage, world_size=spec.depth, timeout=timedelta(seconds=spec.timeout)
        )
        transport = DistTransport(dist.group.WORLD, spec.stage, spec.timeout)
        worker = StageWorker(stage, spec.depth, transport, loss_fn, spec.input_meta, spec.output_meta, spec.slots)
        settle_process()
    except BaseException as exc:
        send(conn, ("error", describe(exc)))
        return
    finally:
        faulthandler.cancel_dump_traceback_later()
    send(conn, ("ok", None))
    try:
        served = _serve(worker, conn)
    finally:
        dist.destroy_process_group()
        conn.close()
    # Nothing is left to release: skip the interpreter's teardown of torch (a second or more).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if served else 1)


def _rendezvous_port(conn: Connection, timeout: float) -> int:
    """The port of the controller's store, which it makes once every worker is forked (``ProcessRuntime``)."""
    if not conn.poll(timeout):
        raise TimeoutError(f"the controller sent no rendezvous port within {timeout:.0f}s")
    return recv(conn)


def _serve(worker: StageWorker, conn: Connection) -> bool:
    """Answer commands in order until ``close`` (True) or a failure (False)."""
    stage = worker.stage

    def step(plan: StepActions, deliveries: list[tuple[str, int, Tensor]], receives: list[Message] | None,
             receives_after: list[Message]) -> tuple[float | None, dict, dict, dict]:  # fmt: skip
        for kind, frame, tensor in deliveries:
            worker.transport.put(kind, frame, tensor)
        record = worker.run_step(plan, receives, receives_after)
        return record.stage_seconds[stage.index], record.outputs, record.losses, record.readings

    handlers: dict[str, Callable[..., Any]] = {
        "step": step,
        "new_epoch": worker.new_epoch,
        "state_dict": stage.state_dict,
        "load_state_dict": stage.load_state_dict,
        "set_lr": stage.set_lr,
        "set_group_options": stage.set_group_options,
        "module": lambda: stage.module,
    }
    parent = os.getppid()
    while True:
        try:
            while not conn.poll(PARENT_POLL_S):
                if os.getppid() != parent:
                    return False  # the controller (or the fork server that started this worker) is gone
            name, args = recv(conn)
        except (EOFError, OSError):
            return False  # the controller is gone
        if name == "close":
            return True
        try:
            result = handlers[name](*args)
        except Exception as exc:  # the step cannot complete: report, and let the controller stop us all
            traceback.print_exc()
            send(conn, ("error", describe(exc)))
            return False
        send(conn, ("ok", result))
