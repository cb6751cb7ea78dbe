"""A run of one claimed execution as the helpers that call back into it see it: the route
limiter (executions/worker/limiter.py), compensation (executions/worker/compensating.py) and the
endings (executions/worker/endings.py). `Run` is typed once here and `runner._Run` is one; each
helper reads the run, and calls back into it, the same way. `RunnerDeps` is what every run of a
process shares.
"""

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from actions.base import ActionResult
from orquestador.workerconfig import WorkerConfig

from ..queue.claims import Place, Snapshot
from ..queue.leases import Fence
from .calls import Call, Resolver
from .groupcommit import Database, GroupWrites
from .writeretry import Flag, Ride

if TYPE_CHECKING:  # the limiter's own module calls back into runs: typed here, imported there
    from .limiter import Handoff


@dataclass
class RunnerDeps:
    """What a run needs besides its connection and holder; shared by every run of a process."""

    config: WorkerConfig
    resolve: Resolver
    rng: random.Random
    writes: GroupWrites
    # The runtime's database probe: held writes wait on it through an outage (writeretry.Ride).
    reachable: Callable[[Flag], Awaitable[bool]] | None = None
    # The dispatcher's, when it claims the executions this process's calls pass places to.
    handoff: "Handoff | None" = None


class Run(Protocol):
    """A run of one dispatch, as the helpers that call back into it see it."""

    deps: RunnerDeps
    db: Database  # a connection, or where to borrow one for each step
    ride: Ride | None  # how its writes ride through a database outage (writeretry.py)
    handed: Place | None  # a route's place granted with the claim, until its call uses it

    @property
    def fence(self) -> Fence:
        """The holder, unchanged in every fenced write."""

    @property
    def log_extra(self) -> dict[str, Any]:
        """What every log line of the run starts with."""

    @property
    def audit(self) -> dict[str, Any]:
        """What every audit event of the run starts with."""

    async def action(
        self,
        sequence: int,
        action: dict[str, Any],
        snapshot: Snapshot,
        outputs: dict[str, dict[str, Any]],
        *,
        last: bool = False,
    ) -> dict[str, Any]:
        """Call one action (or reuse its checkpoint) and commit its output."""

    async def start(self, call: Call) -> Call:
        """Commit the attempt's RUNNING checkpoint; the call with its attempt number."""

    def call(self, call: Call, snapshot: Snapshot) -> Awaitable[ActionResult]:
        """The adapter's call, to await, no transaction open."""

    async def write(
        self, statement: str, write: Callable[[], Awaitable[Any]], step: str | None = None
    ) -> Any:
        """A fenced write, retried and ridden through an outage (writeretry.py)."""
