"""Control-flow exceptions shared by stages, handlers and the agent loop."""


class JobInterrupted(Exception):
    """The job must stop now; the stage ends it in the matching terminal state."""


class JobCancelled(JobInterrupted):
    """Cancellation was asked for (POST /cancel, /stop, stale-policy cleanup)."""


class JobDeadlineExceeded(JobInterrupted):
    """The job's budget of time inside stages is spent."""


class NoBackendAvailable(Exception):
    """No healthy inference backend was registered before the job's deadline."""


class LeaseLost(JobInterrupted):
    """This attempt's lease on the stage expired and was taken over: stop without writing anything."""


class WorkerDraining(JobInterrupted):
    """The worker is shutting down: give the stage back so another worker runs it."""
