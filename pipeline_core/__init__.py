"""The PARTIME engine: split an nn.Sequential into stages that all learn on every frame.

Knows nothing of video or HTTP. See ``Pipeline`` for the API and ``schedules`` for the
update rules it can execute.
"""

from .balance import balance
from .errors import PipelineError, ScheduleError
from .pipeline import Pipeline, StepResult
from .schedules import SCHEDULES, Action, Op, Schedule

__all__ = [
    "Pipeline",
    "StepResult",
    "balance",
    "Schedule",
    "SCHEDULES",
    "Action",
    "Op",
    "PipelineError",
    "ScheduleError",
]
