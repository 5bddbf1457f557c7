"""Redis operations written once, run by a sync client (the workers) or an asyncio one (the API).

An operation is a generator: it yields each round trip it needs (one command, a pipeline or a Lua
script), receives the reply, and returns its result. `Runner` sends the round trips with redis-py's
sync clients, `AsyncRunner` awaits them on redis.asyncio clients: the wire knowledge of an operation
(its keys, its arguments, how its reply is read, which round trips it takes) lives in the operation, as
farm/client/calls.py does for HTTP. Running an operation adds no command and no round trip.

A twin's methods are its operations: `create = OpMethod(JobOps.create)`, declared once in a class the
sync and the async twin share, gives each the operation's signature (mypy checks callers against it: the
sync twin's returns the result, the async twin's a coroutine) and docstring, and runs its body with the
instance's `runner` on its `ops`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeAlias, TypeVar, cast, overload

import redis
import redis.asyncio as aioredis
from redis.client import Pipeline

T = TypeVar("T")
P = ParamSpec("P")
Client = TypeVar("Client", redis.Redis, aioredis.Redis)
"""A sync client or an asyncio one."""


class On(Enum):
    """Which Redis a round trip goes to."""

    STATE = "state"
    BROKER = "broker"
    """The Celery broker's Redis; the state Redis when the broker is not another one."""


# The command callables are typed against the sync client: redis-py's asyncio client and pipelines
# share its command methods (redis.commands.core), so mypy checks each command's arguments once.
@dataclass(frozen=True)
class Command:
    """One command: `Command(lambda r: r.zadd(key, {member: score}))`."""

    send: Callable[[redis.Redis], Any]
    on: On = On.STATE


@dataclass(frozen=True)
class Batch:
    """Commands sent in one pipeline; the reply is their replies, in order."""

    queue: Callable[[Pipeline], Any]
    transaction: bool = False
    on: On = On.STATE


@dataclass(frozen=True)
class Script:
    """A Lua script by EVALSHA (loaded on first use), given its keys in KEYS[] and ARGV."""

    source: str
    keys: Sequence[str]
    args: Sequence[Any] = ()
    on: On = On.STATE


Step: TypeAlias = Command | Batch | Script
Op: TypeAlias = Generator[Step, Any, T]
"""An operation yielding its round trips and returning T."""


@dataclass(frozen=True)
class _Done:
    value: Any


def _advance(op: Op[Any], reply: Any) -> Step | _Done:
    """Hands the operation the reply to its last round trip: its next round trip, or its result."""
    try:
        return op.send(reply)
    except StopIteration as done:
        return _Done(done.value)


class _Clients(Generic[Client]):
    """What a runner holds: the Redis each round trip goes to and the scripts registered with it."""

    def __init__(self, state: Client, broker: Client | None = None) -> None:
        self._clients: dict[On, Client] = {On.STATE: state, On.BROKER: broker or state}
        self._scripts: dict[tuple[On, str], Any] = {}

    def _script(self, step: Script, client: Any) -> Any:
        """Runs a script by EVALSHA, registered with its client on first use."""
        script = self._scripts.get((step.on, step.source))
        if script is None:
            script = self._scripts[(step.on, step.source)] = client.register_script(step.source)
        return script(keys=list(step.keys), args=list(step.args))


class Runner(_Clients[redis.Redis]):
    """Runs operations on sync clients."""

    def __call__(self, op: Op[T]) -> T:
        step = _advance(op, None)
        while not isinstance(step, _Done):
            step = _advance(op, self._send(step))
        return cast(T, step.value)

    def _send(self, step: Step) -> Any:
        client = self._clients[step.on]
        if isinstance(step, Command):
            return step.send(client)
        if isinstance(step, Batch):
            pipe = client.pipeline(transaction=step.transaction)
            step.queue(pipe)
            return pipe.execute()
        return self._script(step, client)


class AsyncRunner(_Clients[aioredis.Redis]):
    """Runs operations on redis.asyncio clients."""

    async def __call__(self, op: Op[T]) -> T:
        step = _advance(op, None)
        while not isinstance(step, _Done):
            step = _advance(op, await self._send(step))
        return cast(T, step.value)

    def _send(self, step: Step) -> Awaitable[Any]:
        # The steps' callables are typed for the sync client (see Command); here they get the async one.
        client: Any = self._clients[step.on]
        if isinstance(step, Command):
            return cast(Awaitable[Any], step.send(client))
        if isinstance(step, Batch):
            return _batch(client.pipeline(transaction=step.transaction), step)
        return cast(Awaitable[Any], self._script(step, client))


async def _batch(pipe: Any, step: Batch) -> Any:
    # Leaving the block resets the pipeline: a cluster's transaction keeps its connection until then, and
    # a script loaded after it would fail on that node.
    async with pipe:
        step.queue(pipe)
        return await pipe.execute()


RunnerT = TypeVar("RunnerT", Runner, AsyncRunner)
"""A twin's runner, over the client of its kind."""


class _SyncTwin(Protocol):
    @property
    def ops(self) -> Any: ...
    @property
    def runner(self) -> Runner: ...


class _AsyncTwin(Protocol):
    @property
    def ops(self) -> Any: ...
    @property
    def runner(self) -> AsyncRunner: ...


class OpMethod(Generic[P, T]):
    """A method of a twin: runs the operation on `self.ops` with `self.runner`, so a sync twin's returns
    the result and an async twin's a coroutine of it."""

    def __init__(self, op: Callable[Concatenate[Any, P], Op[T]]) -> None:
        self.op = op
        self.__doc__ = op.__doc__

    @overload
    def __get__(self, twin: None, owner: type) -> OpMethod[P, T]: ...
    @overload
    def __get__(self, twin: _SyncTwin, owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, twin: _AsyncTwin, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, twin: _SyncTwin | _AsyncTwin | None, owner: type) -> Any:
        if twin is None:
            return self
        op, ops, runner = self.op, twin.ops, twin.runner

        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return runner(op(ops, *args, **kwargs))

        return method
