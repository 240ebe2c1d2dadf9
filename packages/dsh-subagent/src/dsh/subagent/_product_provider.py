"""``ProductProvider``: the start algorithm of a product provider, written once.

``start()`` runs, in this order: the one-shot request checks (``check_one_shot_request``), the
per-run limits check, the reaping of trees dead hosts left and the sweep of the run dirs dead
owners left, the product's launch (argv and env overlay), then either a cold start, or (with
``prewarm``) the take-over of a warm process for the same cwd, argv and env with a cold start on a
miss, and last the pool's replenishment once the run is closed. A failed start is rolled
back (``rollback``): the error becomes the product's safe failure, the run's tree is brought to
exit, a teardown that could not prove exit is combined into an ``ExceptionGroup``, and a
cancellation propagates.

The spawn layer is not imported here (the seam does not depend on it): the limits check and the
reaping are hooks, as is everything that is the product's (its argv, its process, its handshake).
"""

from __future__ import annotations

import abc
import asyncio
import contextvars
import logging
from collections.abc import Hashable, Mapping
from typing import ClassVar, Generic, NoReturn, Protocol, TypeVar

from dsh.subagent._checks import check_one_shot_request
from dsh.subagent._diagnostics import FailureFacts
from dsh.subagent._owned_dirs import sweep_lost_dirs_once
from dsh.subagent._product_run import ProductRun
from dsh.subagent._provider_base import ConfigT, ProviderBase
from dsh.subagent._types import ResolvedStartRequest, SubagentStartRequest
from dsh.subagent._warm import WarmPool
from dsh.subagent.errors import ProductFailure

__all__ = ["EnvNames", "Launch", "ProductProvider", "spawning_warm"]

RunT = TypeVar("RunT", bound=ProductRun)

Launch = tuple[list[str], dict[str, str | None]]
"""A product process's argv and env overlay (``None`` unsets a name)."""

_Key = tuple[str, tuple[str, ...], tuple[tuple[str, str | None], ...]]

_warm_spawn: contextvars.ContextVar[bool] = contextvars.ContextVar("dsh_warm_spawn", default=False)


def spawning_warm() -> bool:
    """True while a warm process is being made (``new_run`` and ``prepare_run`` for the pool).

    Its spawn waits for work that has not come yet, so a provider spawns it idle
    (``SpawnSpec(busy=not spawning_warm())``): its start-up then lowers no run in flight under
    ``nice = "auto"``, and it counts as busy once taken.
    """
    return _warm_spawn.get()


class EnvNames(Protocol):
    """The names side of a provider's env forwarding (``dsh.subprocess.EnvForwarding`` is one)."""

    def names(self) -> tuple[str, ...]: ...

    def credential_names(self, environ: Mapping[str, str]) -> list[str]: ...


class ProductProvider(ProviderBase[ConfigT], Generic[ConfigT, RunT]):
    """A product provider: ``start()``, the rollback and the warm pool, on the product's hooks.

    A subclass sets ``prefix``, ``product``, ``start_stage`` (the stage of its generic start
    failure), ``owned_dir_tag`` (its run dirs' tag) and ``log``, and defines:

    - ``env_forwarding()``: the names of the env it forwards (``credential_names`` and
      ``forwarded_env_names`` come from it);
    - ``limits_problem()`` and ``reap_orphans()``: the spawn layer's checks;
    - ``launch(cwd)``: the argv and env overlay of a product process for ``cwd`` (raise the safe
      failure when the product cannot be launched); with the cwd they are the warm key;
    - ``new_run(cwd, argv, env)``: a run, spawned or ready to spawn (a failure leaves nothing
      behind and raises the safe failure; a step past the spawn uses ``rollback``);
    - ``prepare_run(run, cwd, warm=...)``: the steps before the run can take its task (for a warm
      process: before any request); a failure is rolled back (cold) or discarded (warm).

    The run publishes itself (``ProductRun.publish``).
    """

    prefix: ClassVar[str]
    """The diagnostic prefix, e.g. ``"subagent-codex"``."""
    product: ClassVar[str]
    """The product's display name in failure facts, e.g. ``"Codex"``."""
    max_prompt_chars: ClassVar[int | None] = None
    """The most characters (Unicode code points) of prompt text the pinned product accepts in
    one task, or ``None`` when it states none; measured on the pin and re-measured when it
    moves. A longer prompt is refused before anything starts (:meth:`request_problem`). A
    provider whose product counts otherwise overrides :meth:`prompt_size` and
    :attr:`prompt_unit`; one whose limit depends on its config overrides :meth:`prompt_limit`."""
    prompt_unit: ClassVar[str] = "characters"
    """What :meth:`prompt_size` counts, as the refusal names it."""
    start_stage: ClassVar[str]
    """The stage of a start failure without facts of its own (an unusable cwd, say)."""
    owned_dir_tag: ClassVar[str]
    """The tag of the product's owned run dirs (``dsh-<tag>-<pid>-…``), swept once per process."""
    log: ClassVar[logging.Logger]

    def __init__(self, config: ConfigT | None = None) -> None:
        super().__init__(config)
        self._warm_pool: WarmPool[RunT] | None = None

    # -- the provider ----------------------------------------------------------------------
    def credential_names(self, environ: Mapping[str, str]) -> list[str]:
        return self.env_forwarding().credential_names(environ)

    def forwarded_env_names(self) -> tuple[str, ...]:
        return self.env_forwarding().names()

    @property
    def warm_pool(self) -> WarmPool[RunT]:
        """This instance's warm processes (``prewarm``), created on first use."""
        if self._warm_pool is None:
            self._warm_pool = WarmPool(
                self.config.prewarm,
                make=self._make_warm,
                alive=_warm_usable,
                close=_discard,
                kill=_kill,
            )
        return self._warm_pool

    async def start(self, request: ResolvedStartRequest) -> RunT:
        cwd, _texts = check_one_shot_request(
            request, prefix=self.prefix, unusable_cwd=self.start_failure
        )
        problem = self.request_problem(request)
        if problem is not None:  # before anything is spawned, naming the field
            raise ProductFailure(f"{self.prefix}: {problem}")
        problem = self.limits_problem()
        if problem is not None:  # before anything is spawned, naming the field
            raise ProductFailure(
                f"{self.prefix}: {problem}; set limits_best_effort = true to run anyway"
            )
        await self.reap_orphans()
        sweep_lost_dirs_once(self.owned_dir_tag)  # the run dirs dead owners left (any instance's)
        argv, env = self.launch(cwd, request)
        if self.config.prewarm <= 0:
            return await self._start_cold(cwd, argv, env, request)
        key: _Key = (cwd, tuple(argv), tuple(sorted(env.items())))
        run = await self._start_warm(key, request)
        if run is None:
            run = await self._start_cold(cwd, argv, env, request)
        self.warm_pool.replenish_after(run.wait_closed(), key)  # once this run is closed
        return run

    async def aclose(self) -> None:
        """Close this instance's warm processes (``prewarm``); later starts are cold. Idempotent.

        Runs already published are the caller's; they are not touched.
        """
        if self._warm_pool is not None:
            await self._warm_pool.aclose()

    def request_problem(self, request: SubagentStartRequest) -> str | None:
        """Why the product would refuse ``request`` by its own limits, naming the field and both
        sizes, or ``None``. ``SubagentService.check`` asks it too, so a background job is
        refused before it is queued."""
        limit = self.prompt_limit()
        if limit is None:
            return None
        size = sum(self.prompt_size(text) for text in request.texts)
        if size > limit:
            return (
                f'the "prompt" field is {size:,} {self.prompt_unit}; {self.product} accepts at'
                f" most {limit:,}"
            )
        return None

    def prompt_limit(self) -> int | None:
        """The prompt limit of this instance's product: :attr:`max_prompt_chars`."""
        return self.max_prompt_chars

    def prompt_size(self, text: str) -> int:
        """The size of one prompt text as the product counts it: Unicode code points."""
        return len(text)

    def start_failure(self, category: str = "unknown") -> ProductFailure:
        """The product's safe start failure at ``start_stage``."""
        facts = FailureFacts(self.product, self.start_stage, category)
        return ProductFailure.from_facts(self.prefix, facts)

    async def rollback(self, run: RunT, error: BaseException) -> NoReturn:
        """Bring a run that failed to start to whole-tree exit, then raise the safe error.

        - An ``Exception`` becomes the product's facts (``run.startup_failure``), else its
          generic start failure; the raw error is the ``__cause__``.
        - Anything else (a cancellation, a ``KeyboardInterrupt``) propagates as it is.
        - When the teardown cannot prove exit too: a start failure and the teardown failure are
          raised together as ``ExceptionGroup("<failure>; <teardown>", [failure, teardown])``; a
          cancelled start raises the teardown failure (a job killed while starting still shows
          it; the task stays cancelling); any other ``BaseException`` propagates from it.
        - A ``CancelledError`` of the caller, cancelled again while the close ran, propagates.
        """
        failure: ProductFailure | None = None
        cause: BaseException = error
        if isinstance(error, Exception):
            known = run.startup_failure(error)
            if known is None:
                failure = self.start_failure()
            else:
                facts, cause = known
                failure = ProductFailure.from_facts(self.prefix, facts)
        try:
            await run.aclose()
        except Exception as teardown:
            if isinstance(error, asyncio.CancelledError):
                raise teardown from teardown.__cause__
            if failure is None:
                raise error from teardown
            failure.__cause__ = cause
            self.log.info("%s", failure)
            raise ExceptionGroup(f"{failure}; {teardown}", [failure, teardown]) from None
        if failure is None:
            raise error
        self.log.info("%s", failure)
        self.log.debug("%s start failed", self.product, exc_info=cause)
        raise failure from cause

    # -- hooks -----------------------------------------------------------------------------
    @abc.abstractmethod
    def env_forwarding(self) -> EnvNames:
        """This instance's env forwarding (names only are read here)."""

    @abc.abstractmethod
    def limits_problem(self) -> str | None:
        """Why this machine cannot enforce the configured ``limits``, or ``None``."""

    @abc.abstractmethod
    async def reap_orphans(self) -> None:
        """Reap the process trees dead hosts left (once per process)."""

    @abc.abstractmethod
    def launch(self, cwd: str, request: ResolvedStartRequest) -> Launch:
        """The argv and env overlay of a product process in ``cwd``; raise the safe failure.

        ``request`` is the checked request the process is for. A request field that changes the
        launch (a product flag) changes the argv, and with it the warm-pool key: such a request
        starts cold unless a warm process was made for the same launch.
        """

    @abc.abstractmethod
    async def new_run(self, cwd: str, argv: list[str], env: dict[str, str | None]) -> RunT:
        """A run for ``argv`` in ``cwd``: spawned (or ready to spawn), not yet prepared."""

    @abc.abstractmethod
    async def prepare_run(self, run: RunT, cwd: str, *, warm: bool) -> None:
        """The steps before ``run`` can take its task; ``warm``: it waits for a request."""

    # -- internals -------------------------------------------------------------------------
    async def _start_cold(
        self, cwd: str, argv: list[str], env: dict[str, str | None], request: ResolvedStartRequest
    ) -> RunT:
        run = await self.new_run(cwd, argv, env)
        try:
            await self.prepare_run(run, cwd, warm=False)
            await run.publish(request)
        except BaseException as error:
            await self.rollback(run, error)
        self.log.debug("%s run %s published", self.product, run.id)
        return run

    async def _start_warm(self, key: _Key, request: ResolvedStartRequest) -> RunT | None:
        """A published run on a warm process, or ``None``: the caller starts cold."""
        run = await self.warm_pool.take(key)
        if run is None:
            return None
        _set_busy(run, True)  # it counts as a run in flight again (nice = "auto")
        try:
            await run.publish(request)
        except Exception:
            # The warm process failed before the task was delivered (it exited since the take):
            # not the request's failure. It is torn down and the start goes cold.
            self.log.debug(
                "a warm %s process failed before its task; starting cold",
                self.product,
                exc_info=True,
            )
            await run.discard()  # raises the safe teardown failure if exit was not proven
            return None
        except BaseException as error:
            await self.rollback(run, error)
        self.log.debug("%s run %s published on a warm process", self.product, run.id)
        return run

    async def _make_warm(self, key: Hashable) -> RunT:
        assert isinstance(key, tuple)
        cwd, argv, env = key
        token = _warm_spawn.set(True)
        try:
            run = await self.new_run(cwd, list(argv), dict(env))
            try:
                await self.prepare_run(run, cwd, warm=True)
            except BaseException:
                try:
                    await run.discard()
                except Exception:
                    self.log.debug(
                        "closing a warm process that failed to start failed", exc_info=True
                    )
                raise
        finally:
            _warm_spawn.reset(token)
        _set_busy(run, False)  # waiting for a delegation: no contention (nice = "auto")
        return run


def _set_busy(run: ProductRun, busy: bool) -> None:
    process = run.process
    if process is not None:
        process.set_busy(busy)


def _warm_usable(run: ProductRun) -> bool:
    return run.warm_usable()


async def _discard(run: ProductRun) -> None:
    await run.discard()


def _kill(run: ProductRun) -> None:
    process = run.process
    if process is not None:
        process.kill_now()
