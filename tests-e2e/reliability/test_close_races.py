"""Close races: a hypothesis state machine over both providers, with scripted stand-ins.

Several tasks race ``run.aclose()``, ``run.cancel()``, ``job_kill``, ``JobRegistry.close_owner()``
and ``SubprocessRuntime.aclose()``, over Codex and Claude Code runs started directly and as
background jobs of ``SubagentTool``. Two stand-in behaviours per product: ``answer`` (a result at
once) and ``stubborn`` (no result; the tree, a child included, ignores SIGTERM and stdin EOF, so
only the ladder's SIGKILL after ``dispose_grace_ms`` ends it). A run or job may be drawn
``faulty``: its process teardown really ends the tree, then reports a ``TeardownError``, so the
failure must reach every ``aclose()`` caller and the job's detail, in its safe form.

After every step:

- no close has returned, raised or been cancelled while a process of a tree it covers was alive.
  Each close is watched by a wrapper that walks /proc (``marked_processes(tree_id)``, which reads
  the tree marker of every process) at the moment the close ends;
- every job settled at most once (exactly once by the end), with the status its history allows,
  and no job settled while a process of its tree was alive.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from dsh.jobs import JobDone, JobRegistry, JobStatus
from dsh.jobs.tools import JobKillTool
from dsh.subagent import (
    Descriptor,
    Parent,
    ProductFailure,
    ResolvedStartRequest,
    StopReason,
    SubagentRun,
    SubagentService,
    TextBlock,
)
from dsh.subagent_claude_code import ClaudeCodeProviderConfig
from dsh.subagent_claude_code import _provider as claude_provider_module
from dsh.subagent_claude_code.testing import provider_with_cli
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex import _provider as codex_provider_module
from dsh.subprocess import (
    ManagedProcess,
    SpawnSpec,
    SubprocessRuntime,
    TeardownError,
    marked_processes,
)
from dsh.subprocess.testing import describe_processes
from dsh.tool_subagent import Caller, SubagentTool, SubagentToolConfig

pytestmark = [pytest.mark.timeout(240)]

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
CODEX_STANDIN = PACKAGES / "dsh-subagent-codex" / "tests" / "standin_app_server.py"
CLAUDE_STANDIN = PACKAGES / "dsh-subagent-claude-code" / "tests" / "stand_ins" / "scripted_cli.py"
GRACE_MS = 250
STEP_LIMIT_S = 30.0
ANSWER = "the answer"
PRODUCTS = ("codex", "claude-code")
SCENARIOS = ("answer", "stubborn")
OWNERS = ("owner-a", "owner-b")
KILL_REASON = "race kill"
FAULTY = "!"
"""A tag ending in this marks a run or job whose process teardown reports a failure."""
TEARDOWN_LINE = re.compile(
    r"subagent-(?:codex|claude-code): Product subagent failure \(product: (?:Codex|Claude Code); "
    r"stage: teardown; category: unknown\)"
)
_START_LINE = (
    r"subagent-(?:codex|claude-code): Product subagent failure \(product: (?:Codex|Claude Code); "
    r"stage: [a-z-]+; category: [A-Za-z-]+(?:; exit code: -?\d+)?(?:; signal: SIG[A-Z0-9]+)?\)"
)
SAFE_LINES = re.compile(f"(?:dispose failed: )?{_START_LINE}(?:; {_START_LINE})*")
"""What a killed job may show after its reason: a failed teardown, or a start that failed as the
kill landed (a runtime close can end a start too), joined by ``; ``."""

STATS: dict[str, int] = dict.fromkeys(("examples", "runs", "jobs", "closes", "trees"), 0)

_TAG: ContextVar[str | None] = ContextVar("close_races_tag", default=None)
"""The run or job a spawn belongs to (set around each start; job tasks inherit it)."""


class RecordingRuntime(SubprocessRuntime):
    """Records the tree id of every process it spawns, under the current ``_TAG``."""

    def __init__(self, trees: dict[str, list[ManagedProcess]]) -> None:
        super().__init__()
        self.trees = trees
        self.spawned: list[ManagedProcess] = []

    async def spawn(self, spec: SpawnSpec) -> ManagedProcess:
        proc = await super().spawn(spec)
        self.spawned.append(proc)
        tag = _TAG.get()
        if tag is not None:
            self.trees.setdefault(tag, []).append(proc)
            if tag.endswith(FAULTY):
                _fail_teardown(proc)
        return proc


def _fail_teardown(proc: ManagedProcess) -> None:
    """Fault injection: the tree really exits, then every aclose() reports a teardown failure."""
    real_aclose = proc.aclose

    async def failing_aclose() -> None:
        await real_aclose()
        raise TeardownError("injected")

    proc.aclose = failing_aclose  # type: ignore[method-assign]


def tree_problems(procs: list[ManagedProcess]) -> list[str]:
    """What is wrong with ``procs`` after a close: live members (a /proc walk), or no proof.

    The /proc walk (``marked_processes`` reads every process's tree marker) is the independent
    check. It cannot tell a proven exit from a cut-short close whose synchronous SIGKILL
    happened to land in time, so the process layer's own proof (``tree_gone``) is checked too.
    """
    problems = []
    for proc in procs:
        alive = marked_processes(proc.tree_id)
        if alive:
            problems.append(f"tree {proc.pid} alive: {describe_processes(alive)}")
        elif not proc.tree_gone:
            problems.append(f"tree {proc.pid} exit not proven")
    return problems


def killed_detail_ok(detail: str | None, faulty: bool) -> bool:
    """The reason alone, or ``[<reason>; ]`` then safe lines (a teardown one only if faulty)."""
    rest = (detail or "").removeprefix(KILL_REASON).removeprefix("; ")
    if not rest:
        return True
    if not faulty and "stage: teardown" in rest:
        return False
    return SAFE_LINES.fullmatch(rest) is not None


def request(cwd: Path, provider: str, owner: str = "direct") -> ResolvedStartRequest:
    return ResolvedStartRequest(
        prompt=(TextBlock("task"),),
        parent=Parent(session_id=owner, cwd=str(cwd)),
        descriptor=Descriptor(provider=provider),
    )


def make_providers(log_dir: Path) -> dict[str, Any]:
    providers: dict[str, Any] = {}
    answer_codex = json.dumps([[ANSWER, "final_answer"]])
    codex_envs = {
        "answer": {"STANDIN_SCENARIO": "select", "STANDIN_ARG": answer_codex},
        "stubborn": {"STANDIN_SCENARIO": "stubborn"},
    }
    claude_scenarios = {"answer": "late-results", "stubborn": "stubborn"}
    for scenario in SCENARIOS:
        name = f"codex-{scenario}"
        codex_config = CodexProviderConfig(
            provider_name=name,
            env=codex_envs[scenario],
            stderr="discard",
            dispose_grace_ms=GRACE_MS,
        )
        providers[name] = CodexProvider(codex_config, _program=[sys.executable, str(CODEX_STANDIN)])
        name = f"claude-code-{scenario}"
        env = {
            "STANDIN_SCENARIO": claude_scenarios[scenario],
            "STANDIN_LOG": str(log_dir / f"{name}.jsonl"),
        }
        claude_config = ClaudeCodeProviderConfig(
            provider_name=name, env=env, stderr="discard", dispose_grace_ms=GRACE_MS
        )
        providers[name] = provider_with_cli(claude_config, [sys.executable, str(CLAUDE_STANDIN)])
    return providers


@dataclass
class DirectRun:
    tag: str
    scenario: str
    run: SubagentRun | None
    result: asyncio.Task[Any] | None = None
    runtime_closed: bool = False


@dataclass
class JobRecord:
    tag: str
    job_id: str
    owner: str
    scenario: str
    kill_requested: bool = False
    runtime_closed: bool = False
    settlements: list[JobDone] = field(default_factory=list)
    dropped: bool = False
    rejected: bool = False


class CloseRaces(RuleBasedStateMachine):
    """See the module docstring. ``workdir`` is set by the test before the machine runs."""

    workdir: Path
    current: CloseRaces | None = None
    runs = Bundle("runs")
    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.trees: dict[str, list[ManagedProcess]] = {}
        self.runtime = RecordingRuntime(self.trees)
        self.runtimes = [self.runtime]
        self.violations: list[str] = []
        self.closes: list[asyncio.Task[None]] = []
        self.cancellable: list[asyncio.Task[None]] = []
        self.direct: dict[str, DirectRun] = {}
        self.records: dict[str, JobRecord] = {}
        self.counter = 0
        self.providers = make_providers(self.workdir)
        CloseRaces.current = self
        self.loop.run_until_complete(self._mount())

    async def _mount(self) -> None:
        self.service = SubagentService()
        for provider in self.providers.values():
            self.service.register(provider)
        self.registry = JobRegistry()
        self.registry.on_job_done(self._on_job_done)
        self.tools = {
            name: SubagentTool(
                SubagentToolConfig(provider=name, tool_name=name, max_depth="provider-managed"),
                self.service,
                self.registry,
            )
            for name in self.providers
        }
        self.kill_tool = JobKillTool(self.registry)

    # ---- helpers ---------------------------------------------------------------------------

    def _drive(self, awaitable: Awaitable[Any]) -> Any:
        async def bounded() -> Any:
            async with asyncio.timeout(STEP_LIMIT_S):
                return await awaitable

        return self.loop.run_until_complete(bounded())

    def _new_tag(self, kind: str) -> str:
        self.counter += 1
        return f"{kind}-{self.counter}"

    def _watch(
        self,
        what: str,
        trees: Callable[[], list[ManagedProcess]],
        close: Awaitable[Any],
        *,
        cancellable: bool = True,
        failure: Callable[[], str] = lambda: "never",
    ) -> None:
        """``failure()`` (asked when the close ends) is ``never``, ``allowed`` or ``required``: a
        close covering a faulty tree may (or, for a run's ``aclose()``, must) report it."""
        """Run ``close`` in a task of its own; when it ends in any way, walk /proc at once."""

        async def watched() -> None:
            outcome = "returned"
            try:
                await close
            except asyncio.CancelledError:
                outcome = "was cancelled"
            except Exception as error:
                outcome = f"raised {type(error).__name__}"
                if failure() == "never":
                    self.violations.append(f"{what} raised {error!r} (no fault was injected)")
                elif isinstance(error, ProductFailure) and not TEARDOWN_LINE.fullmatch(str(error)):
                    self.violations.append(f"{what} raised an unsafe or wrong text: {error}")
            else:
                if failure() == "required":
                    self.violations.append(f"{what} returned: the teardown failure was hidden")
            problems = tree_problems(trees())
            if problems:
                self.violations.append(f"{what} {outcome} before whole-tree exit: {problems}")

        task = self.loop.create_task(watched())
        self.closes.append(task)
        if cancellable:
            self.cancellable.append(task)
        self._drive(asyncio.sleep(0.01))  # let it begin

    def _on_job_done(self, event: JobDone) -> None:
        snapshot = event.snapshot
        record = next((r for r in self.records.values() if r.job_id == snapshot.id), None)
        if record is None:
            self.violations.append(f"an unknown job settled: {snapshot}")
            return
        record.settlements.append(event)
        if len(record.settlements) > 1:
            self.violations.append(f"job {snapshot.id} settled twice")
        problems = tree_problems(self.trees.get(record.tag, []))
        if problems:
            self.violations.append(f"job {snapshot.id} settled before whole-tree exit: {problems}")
        status = snapshot.status
        faulty = record.tag.endswith(FAULTY)
        if record.kill_requested:
            allowed = {JobStatus.KILLED}
            if not killed_detail_ok(snapshot.detail, faulty):
                self.violations.append(f"job {snapshot.id} killed with detail {snapshot.detail!r}")
        elif record.runtime_closed:
            allowed = {JobStatus.FAILED, JobStatus.COMPLETED}
        elif faulty:
            allowed = {JobStatus.FAILED} if record.scenario == "answer" else set()
            detail = snapshot.detail or ""
            if not detail.startswith("completed; dispose failed: ") or not TEARDOWN_LINE.fullmatch(
                detail.removeprefix("completed; dispose failed: ")
            ):
                self.violations.append(f"job {snapshot.id} failed with detail {detail!r}")
        else:
            allowed = {JobStatus.COMPLETED} if record.scenario == "answer" else set()
        if status not in allowed:
            self.violations.append(
                f"job {snapshot.id} ({record.scenario}, killed={record.kill_requested}, "
                f"runtime closed={record.runtime_closed}) settled {status} ({snapshot.detail})"
            )

    # ---- rules -----------------------------------------------------------------------------

    @rule(
        target=runs,
        product=st.sampled_from(PRODUCTS),
        scenario=st.sampled_from(SCENARIOS),
        faulty=st.booleans(),
    )
    def start_run(self, product: str, scenario: str, faulty: bool) -> str:
        tag = self._new_tag("run") + (FAULTY if faulty else "")
        name = f"{product}-{scenario}"
        token = _TAG.set(tag)
        try:
            run: SubagentRun | None = self._drive(
                self.providers[name].start(request(self.workdir, name))
            )
        except Exception as error:
            # Only a start racing a runtime close may fail (the runtime refuses to spawn).
            if not any(r.closed for r in self.runtimes):
                self.violations.append(f"start of {tag} ({name}) raised {error!r}")
            run = None
        finally:
            _TAG.reset(token)
        record = DirectRun(tag, scenario, run)
        if run is not None:
            record.result = self.loop.create_task(run.result())
        self.direct[tag] = record
        return tag

    @rule(
        target=jobs,
        product=st.sampled_from(PRODUCTS),
        scenario=st.sampled_from(SCENARIOS),
        owner=st.sampled_from(OWNERS),
        faulty=st.booleans(),
    )
    def start_job(self, product: str, scenario: str, owner: str, faulty: bool) -> str:
        tag = self._new_tag("job") + (FAULTY if faulty else "")
        name = f"{product}-{scenario}"
        arguments = {"description": tag, "prompt": "task", "run_in_background": True}
        token = _TAG.set(tag)
        try:
            out = self._drive(self.tools[name].call(arguments, Caller(owner, str(self.workdir))))
        finally:
            _TAG.reset(token)
        if out.is_error:
            # Stubborn jobs pile up: the registry's admission limit is a legitimate answer.
            if not out.text.startswith("background job limit reached"):
                self.violations.append(f"start of job {tag} answered {out.text!r}")
            self.records[tag] = JobRecord(tag, "", owner, scenario, dropped=True, rejected=True)
            return tag
        self.records[tag] = JobRecord(tag, out.value["job_id"], owner, scenario)
        return tag

    @rule(tag=runs, callers=st.integers(min_value=1, max_value=3))
    def aclose_run(self, tag: str, callers: int) -> None:
        """``callers`` tasks call ``aclose()`` at the same time."""
        record = self.direct[tag]
        if record.run is not None:
            expected = "required" if tag.endswith(FAULTY) else "never"
            for caller in range(callers):
                what = f"aclose {caller + 1}/{callers} of {tag}"
                self._watch(
                    what,
                    lambda: self.trees.get(tag, []),
                    record.run.aclose(),
                    failure=lambda: expected,
                )

    @rule(tag=runs)
    def cancel_run(self, tag: str) -> None:
        record = self.direct[tag]
        if record.run is None or record.result is None:
            return
        record.run.cancel("race")
        result = self._drive(asyncio.wait_for(asyncio.shield(record.result), 1.0))
        allowed = {StopReason.ABORTED}
        if record.scenario == "answer":
            allowed.add(StopReason.COMPLETED)
        if record.runtime_closed:
            allowed.add(StopReason.ERROR)
        if result.stop_reason not in allowed:
            self.violations.append(f"{tag} ({record.scenario}) settled {result} after cancel()")

    @rule(index=st.integers(min_value=0, max_value=7))
    def cancel_a_close(self, index: int) -> None:
        # Drawn by index, not from the pending ones: which closes are pending depends on timing,
        # and hypothesis needs the same draws on a replay.
        if self.cancellable:
            self.cancellable[index % len(self.cancellable)].cancel()
            self._drive(asyncio.sleep(0))

    @rule(tag=jobs)
    def job_kill(self, tag: str) -> None:
        record = self.records[tag]
        if record.dropped:
            return
        arguments = {"job_id": record.job_id, "reason": KILL_REASON}
        # Set first: the job may settle while the tool call is still being driven.
        was_requested, record.kill_requested = record.kill_requested, True
        out = self._drive(self.kill_tool.call(arguments, Caller(record.owner)))
        if out.text.startswith(f"job {record.job_id} had already finished"):
            record.kill_requested = was_requested
        elif not out.text.startswith((f"stopped job {record.job_id} ", "requested cancellation")):
            self.violations.append(f"job_kill of {tag}: {out.text}")

    @rule(owner=st.sampled_from(OWNERS))
    def close_owner(self, owner: str) -> None:
        covered = [r for r in self.records.values() if r.owner == owner and not r.dropped]
        for record in covered:
            record.dropped = True
            if not record.settlements:
                record.kill_requested = True

        def trees() -> list[ManagedProcess]:
            unsettled = [r.job_id for r in covered if not r.settlements]
            if unsettled:
                self.violations.append(f"close_owner({owner}) ended before {unsettled} settled")
            return [tree for r in covered for tree in self.trees.get(r.tag, [])]

        self._watch(f"close_owner({owner})", trees, self.registry.close_owner(Caller(owner)))

    @rule()
    def close_runtime(self) -> None:
        old = self.runtime
        for run in self.direct.values():
            run.runtime_closed = True
        for job in self.records.values():
            if not job.settlements:
                job.runtime_closed = True
        self.runtime = RecordingRuntime(self.trees)
        self.runtimes.append(self.runtime)
        # Cancellable like every other close: a cancelled runtime close still proves each tree
        # gone before the cancellation propagates (this machine found it did not, once).
        self._watch(
            "SubprocessRuntime.aclose()",
            lambda: list(old.spawned),
            old.aclose(),
            failure=lambda: "allowed" if any(t.endswith(FAULTY) for t in self.trees) else "never",
        )

    @rule(seconds=st.sampled_from((0.0, 0.05, 0.4)))
    def let_time_pass(self, seconds: float) -> None:
        self._drive(asyncio.sleep(seconds))

    # ---- checks ----------------------------------------------------------------------------

    @invariant()
    def no_close_returned_early_and_jobs_settled_right(self) -> None:
        assert not self.violations, "\n".join(self.violations)

    def teardown(self) -> None:
        STATS["examples"] += 1
        STATS["runs"] += len(self.direct)
        STATS["jobs"] += len(self.records)
        STATS["closes"] += len(self.closes)
        STATS["trees"] += sum(len(t) for t in self.trees.values())
        try:
            self._drive(self._close_everything())
            unsettled = [
                r.job_id
                for r in self.records.values()
                if not r.rejected and len(r.settlements) != 1
            ]
            if unsettled:
                self.violations.append(f"jobs not settled exactly once: {unsettled}")
            left = [p for procs in self.trees.values() for p in tree_problems(procs)]
            if left:
                self.violations.append(f"after teardown: {left}")
            assert not self.violations, "\n".join(self.violations)
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    async def _close_everything(self) -> None:
        for job in self.records.values():
            if not job.settlements and not job.rejected:
                job.kill_requested = True  # the registry's close kills what is still live
        await self.registry.aclose()
        for direct in self.direct.values():
            if direct.run is not None:
                try:
                    await direct.run.aclose()
                except ProductFailure as error:
                    if not direct.tag.endswith(FAULTY) or not TEARDOWN_LINE.fullmatch(str(error)):
                        self.violations.append(f"final aclose of {direct.tag} raised {error!r}")
                else:
                    if direct.tag.endswith(FAULTY):
                        self.violations.append(f"final aclose of {direct.tag} hid the failure")
        await asyncio.gather(*self.closes)
        for runtime in self.runtimes:
            try:
                await runtime.aclose()
            except (TeardownError, ExceptionGroup):
                if not any(tag.endswith(FAULTY) for tag in self.trees):
                    raise
        await self.service.aclose()


def _machine_runtime() -> SubprocessRuntime:
    assert CloseRaces.current is not None
    return CloseRaces.current.runtime


def test_close_races(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Both providers spawn through the machine's current runtime, so it can be closed under them.
    for module in (codex_provider_module, claude_provider_module):
        monkeypatch.setattr(module, "default_runtime", _machine_runtime)
    CloseRaces.workdir = tmp_path
    began = time.monotonic()
    run_state_machine_as_test(
        CloseRaces,
        settings=settings(
            max_examples=12,
            stateful_step_count=20,
            deadline=None,
            database=None,
            # Timing decides some outcomes, so a replay may differ: report the first failing
            # sequence as found instead of shrinking it (a shrink would replay it many times).
            phases=(Phase.explicit, Phase.generate),
            report_multiple_bugs=False,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    print(f"close races: {time.monotonic() - began:.1f}s, {STATS}")


@pytest.mark.parametrize("product", PRODUCTS)
async def test_close_owner_after_job_kill_waits_for_whole_tree_exit(
    product: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case with real processes, end to end: job_kill, then close_owner mid-close.

    A regression guard for the whole stack. The discriminating tests are per layer (the
    registry's, the tool's and each provider's ``test_close.py``): here, on the old code, the
    awaits after the cut-short close happened to observe the SIGKILLed tree gone in time.
    """
    trees: dict[str, list[ManagedProcess]] = {}
    runtime = RecordingRuntime(trees)
    for module in (codex_provider_module, claude_provider_module):
        monkeypatch.setattr(module, "default_runtime", lambda: runtime)
    name = f"{product}-stubborn"
    provider = make_providers(tmp_path)[name]
    async with SubagentService() as service, JobRegistry() as registry:
        service.register(provider)
        config = SubagentToolConfig(provider=name, max_depth="provider-managed")
        tool = SubagentTool(config, service, registry)
        owner = Caller("owner", str(tmp_path))
        token = _TAG.set("job")
        try:
            arguments = {"description": "d", "prompt": "task", "run_in_background": True}
            started = await tool.call(arguments, owner)
            assert started.value is not None, started.text
            job_id = started.value["job_id"]
        finally:
            _TAG.reset(token)
        deadline = time.monotonic() + 20
        while (
            not trees or len(await asyncio.to_thread(marked_processes, trees["job"][0].tree_id)) < 2
        ):
            assert time.monotonic() < deadline, "the stubborn tree never forked its child"
            await asyncio.sleep(0.02)
        registry.kill(job_id, owner, reason=KILL_REASON)
        await asyncio.sleep(0.05)  # the work is inside the run's close now
        await registry.close_owner(owner)
        assert await asyncio.to_thread(tree_problems, trees["job"]) == []
