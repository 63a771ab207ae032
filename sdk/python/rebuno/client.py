"""``Client`` (async) and ``SyncClient``: the application side of the kernel API.

::

    async with Client() as rb:                       # $REBUNO_URL, $REBUNO_API_KEY
        ex = await rb.create("hello", {"name": "world"})
        async for event in rb.watch(ex.id):
            print(event.seq, event.type)
        print((await rb.get(ex.id)).output)

    rb = SyncClient()
    ex = rb.create("hello", {"name": "world"})
    print(rb.wait(ex.id).output)
"""

from __future__ import annotations

import asyncio
import builtins
import json
import threading
import urllib.parse
from collections.abc import AsyncGenerator, Coroutine, Iterator
from typing import Any, TypeVar

from rebuno._http import iter_sse
from rebuno.agent import kernel_api_key, kernel_transport, kernel_url
from rebuno.errors import NetworkError, error_from_response
from rebuno.types import (
    TERMINAL_STATUSES,
    Approval,
    Event,
    Execution,
    ExecutionPage,
    ForkPoints,
    ResourceView,
    Step,
)

_T = TypeVar("_T")

TERMINAL_STEP_STATUSES = ("succeeded", "failed", "denied", "cancelled")


def _q(s: str) -> str:
    return urllib.parse.quote(str(s), safe="")


def _body(**fields: Any) -> dict[str, Any]:
    """A JSON body of the fields that were given (``None`` means "not sent")."""
    return {k: v for k, v in fields.items() if v is not None}


def _query(**params: Any) -> str:
    items = {k: v for k, v in params.items() if v is not None and v != ""}
    return ("?" + urllib.parse.urlencode(items)) if items else ""


class Client:
    """Async client for applications: executions, events, steps and approvals.

    Args:
        base_url: The kernel (default ``$REBUNO_URL``, else ``http://127.0.0.1:8080``).
        api_key: Sent as ``Authorization: Bearer`` (default ``$REBUNO_API_KEY``, else the
            kernel's local token, found as :mod:`rebuno._localauth` says).
        timeout: Seconds per request.
        retry_for: Seconds to keep retrying a request whose connection could not be
            opened (the kernel restarting), before :class:`~rebuno.errors.NetworkError`.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, timeout: float = 35.0,
                 retry_for: float = 10.0):
        self.base_url = kernel_url(base_url)
        self._t = kernel_transport(self.base_url, kernel_api_key(api_key), timeout)
        self.retry_for = retry_for

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Close pooled connections."""
        await self._t.close()

    async def _get(self, path: str) -> Any:  # the kernel's JSON
        return (await self._t.request("GET", path, retry_for=self.retry_for)).json()

    async def _post(self, path: str, body: Any, *, idempotent: bool = False) -> Any:
        return (await self._t.request("POST", path, json=body, idempotent=idempotent,
                                      retry_for=self.retry_for)).json()

    # --- executions ----------------------------------------------------------------
    async def create(self, agent: str, input: Any = None, *, deadline_seconds: int | None = None,
                     session: str | None = None, parent_execution_id: str | None = None,
                     agent_version: str = "") -> Execution:
        """Start an execution of ``agent`` with ``input`` (any JSON; default ``{}``).

        ``session`` (sent only when given) chains executions into turns: a turn waits
        ``pending`` while another of its session is active, and its handler reads the
        previous turn's ``state`` with :func:`rebuno.previous`. ``agent_version`` is
        accepted for compatibility with the upstream SDK and not sent: this kernel has no
        agent versions (it rejects the field)."""
        del agent_version
        # parent_execution_id continues that completed execution (its state, resources)
        body = _body(agent_id=agent, input=input, deadline_seconds=deadline_seconds, session=session,
                     parent_execution_id=parent_execution_id)
        return Execution.from_json(await self._post("/v0/executions", body))

    async def get(self, execution_id: str) -> Execution:
        """One execution."""
        return Execution.from_json(await self._get(f"/v0/executions/{_q(execution_id)}"))

    async def list(self, *, agent: str | None = None, status: str | None = None, session: str | None = None,
                   cursor: str | None = None, limit: int | None = None) -> ExecutionPage:
        """One page of executions, newest first; pass ``next_cursor`` on for the next."""
        data = await self._get("/v0/executions" + _query(agent_id=agent, status=status, session=session,
                                                         cursor=cursor, limit=limit))
        return ExecutionPage([Execution.from_json(e) for e in data.get("executions", [])], data.get("next_cursor"))

    async def cancel(self, execution_id: str, reason: str | None = None) -> Execution:
        """Cancel an execution and return it (``ConflictError`` code ``conflict`` if it is
        over). The kernel answers ``204``; the execution is read back."""
        body = {"reason": reason} if reason else {}
        await self._post(f"/v0/executions/{_q(execution_id)}/cancel", body)
        return await self.get(execution_id)

    async def events(self, execution_id: str, *, after: int = 0, limit: int | None = None,
                     after_seq: int | None = None) -> builtins.list[Event]:
        """Recorded events with ``event_seq > after`` (at most ``limit``, kernel default
        100). ``after_seq`` is the wire name; ``after`` is kept as a keyword."""
        if after_seq is not None:
            after = after_seq
        data = await self._get(f"/v0/executions/{_q(execution_id)}/events" + _query(after_seq=after, limit=limit))
        return [Event.from_json(e) for e in data or []]

    async def steps(self, execution_id: str) -> builtins.list[Step]:
        """The execution's steps in submission order."""
        data = await self._get(f"/v0/executions/{_q(execution_id)}/steps")
        return [Step.from_json(s) for s in data or []]

    async def list_steps(self, execution_id: str, *, status: str = "") -> builtins.list[Step]:
        """The execution's steps in submission order, optionally only those whose status
        is ``status``: one status (``succeeded``), several separated by commas, or
        ``terminal`` (the kernel's ``?status=terminal``: succeeded, failed, denied). The
        upstream SDK's name; :meth:`steps` lists all."""
        if status == "terminal":
            data = await self._get(f"/v0/executions/{_q(execution_id)}/steps?status=terminal")
            return [Step.from_json(s) for s in data or []]
        steps = await self.steps(execution_id)
        if not status:
            return steps
        wanted = set()
        for part in status.split(","):
            part = part.strip()
            wanted |= set(TERMINAL_STEP_STATUSES) if part == "terminal" else {part}
        return [s for s in steps if s.status in wanted]

    async def get_step(self, execution_id: str, step_id: str) -> Step:
        """One step."""
        return Step.from_json(await self._get(f"/v0/executions/{_q(execution_id)}/steps/{_q(step_id)}"))

    # --- sessions, resources, forks ------------------------------------------------
    async def previous(self, execution_id: str) -> Any:
        """The ``state`` (else ``output``) of the execution's parent turn in its session;
        ``None`` for a first turn."""
        return (await self._get(f"/v0/executions/{_q(execution_id)}/previous")).get("state")

    async def resources(self, execution_id: str) -> builtins.list[ResourceView]:
        """The resources registered on the execution (bindings, generations, coverage)."""
        data = await self._get(f"/v0/executions/{_q(execution_id)}/resources")
        return [ResourceView.from_json(r) for r in data.get("resources", [])]

    async def fork(self, execution_id: str, at_seq: int, session: str | None = None) -> Execution:
        """Fork the execution at event ``at_seq``: a new execution with the same input that
        replays the steps the source had settled by then and runs live afterwards.

        Each resource is restored from the checkpoint covering ``at_seq``, else the newest
        earlier one, else created fresh; the choice is on the returned execution's
        ``restoration`` (``{key: {checkpoint_ref, checkpoint_seq, covered}}``). At a point
        no checkpoint covers, copied results still replay up to ``at_seq`` and may
        describe changes the restored resource does not have. ``session`` (a new one)
        starts a session for the fork's later turns.
        """
        body = _body(at_seq=at_seq, session=session)
        return Execution.from_json(await self._post(f"/v0/executions/{_q(execution_id)}/fork", body))

    async def fork_points(self, execution_id: str, *, after: int | None = None,
                          limit: int | None = None) -> ForkPoints:
        """The events a fork can start from, whether a checkpoint covers each, and the
        checkpoints (``after``/``limit`` page through the events)."""
        return ForkPoints.from_json(await self._get(f"/v0/executions/{_q(execution_id)}/fork-points"
                                                    + _query(after=after, limit=limit)))

    async def watch(self, execution_id: str, *, after: int = 0,
                    give_up_after: float = 30.0) -> AsyncGenerator[Event, None]:
        """Follow the event stream live; ends after the execution's terminal event.

        A dropped connection is resumed with ``Last-Event-ID`` (nothing missed or
        repeated), backing off from 0.2 s to 5 s; after ``give_up_after`` seconds
        without progress it raises :class:`~rebuno.errors.NetworkError`.
        """
        last = after
        delay = 0.2
        loop = asyncio.get_running_loop()
        stalled_since = loop.time()
        while True:
            resp = None
            try:
                resp = await self._t.stream("GET", f"/v0/executions/{_q(execution_id)}/events/stream",
                                            headers={"Last-Event-ID": str(last), "Accept": "text/event-stream"},
                                            read_timeout=45.0)
                if resp.status >= 400:
                    raise error_from_response(resp.status, await resp.read())
                async for ev in iter_sse(resp):
                    if not ev.get("data"):
                        continue
                    event = Event.from_json(json.loads(ev["data"]))
                    if event.seq <= last:
                        continue
                    last = event.seq
                    delay, stalled_since = 0.2, loop.time()
                    yield event
                    if event.type in ("execution.completed", "execution.failed", "execution.cancelled"):
                        return
                # the stream ended without a terminal event: is the execution over?
                ex = await self.get(execution_id)
                if ex.status in TERMINAL_STATUSES and ex.last_seq <= last:
                    return
            except (NetworkError, OSError, asyncio.TimeoutError) as e:
                if loop.time() - stalled_since > give_up_after:
                    raise NetworkError(f"watching {execution_id}: no progress for {give_up_after:.0f}s ({e})") from e
            finally:
                if resp is not None:
                    resp.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def wait(self, execution_id: str, *, timeout: float | None = None, poll: float = 0.2) -> Execution:
        """Wait until the execution is completed, failed or cancelled; return it.
        Raises ``TimeoutError`` after ``timeout`` seconds."""
        async def loop_() -> Execution:
            while True:
                ex = await self.get(execution_id)
                if ex.status in TERMINAL_STATUSES:
                    return ex
                await asyncio.sleep(poll)
        return await asyncio.wait_for(loop_(), timeout)

    # --- approvals -----------------------------------------------------------------
    async def approvals(self, *, status: str | None = "pending",
                        execution_id: str | None = None) -> builtins.list[Approval]:
        """Approvals (default: pending ones; ``status=None`` or ``""`` for all). Also
        called ``list_approvals`` (the upstream SDK's name)."""
        data = await self._get("/v0/approvals" + _query(status=status, execution_id=execution_id))
        return [Approval.from_json(a) for a in data or []]

    list_approvals = approvals

    async def get_approval(self, approval_id: str) -> Approval:
        """One approval."""
        return Approval.from_json(await self._get(f"/v0/approvals/{_q(approval_id)}"))

    async def _decide(self, approval_id: str, verb: str, by: str, reason: str | None) -> Approval:
        body = {"decided_by": by, **({"rationale": reason} if reason else {})}
        await self._post(f"/v0/approvals/{_q(approval_id)}/{verb}", body)  # 204
        return await self.get_approval(approval_id)

    async def approve(self, approval_id: str, *, by: str, reason: str | None = None) -> Approval:
        """Grant an approval (``POST /grant``; ``ConflictError`` if already decided) and
        return it as decided."""
        return await self._decide(approval_id, "grant", by, reason)

    async def deny(self, approval_id: str, *, by: str, reason: str | None = None) -> Approval:
        """Deny an approval; the agent's call gets a refusal carrying ``reason``."""
        return await self._decide(approval_id, "deny", by, reason)

    async def grant_approval(self, approval_id: str, *, decided_by: str, rationale: str = "") -> Approval:
        """Upstream name of :meth:`approve`."""
        return await self.approve(approval_id, by=decided_by, reason=rationale or None)

    async def deny_approval(self, approval_id: str, *, decided_by: str, rationale: str = "") -> Approval:
        """Upstream name of :meth:`deny`."""
        return await self.deny(approval_id, by=decided_by, reason=rationale or None)

    # --- misc ----------------------------------------------------------------------
    async def agents(self) -> builtins.list[dict[str, Any]]:
        """The kernel's known agents (``id``, ``lease_timeout_seconds``, ``workers`` ...)."""
        agents: builtins.list[dict[str, Any]] = await self._get("/v0/agents") or []
        return agents

    # --- admin: agents, policies, API keys (upstream's admin routes) ----------------
    async def _delete(self, path: str) -> Any:
        return (await self._t.request("DELETE", path, retry_for=self.retry_for)).json()

    async def get_agent(self, agent_id: str) -> dict[str, Any]:
        """One agent (``policy_bundle`` when it has a policy; never its secret)."""
        agent: dict[str, Any] = await self._get(f"/v0/agents/{_q(agent_id)}")
        return agent

    async def register_agent(self, agent_id: str, *, webhook_url: str | None = None, secret: str | None = None,
                             lease_timeout_seconds: int | None = None) -> dict[str, Any]:
        """Register (or update) an agent at run time; kept by the kernel across restarts."""
        body = _body(id=agent_id, webhook_url=webhook_url, secret=secret,
                     lease_timeout_seconds=lease_timeout_seconds)
        agent: dict[str, Any] = await self._post("/v0/agents", body, idempotent=True)
        return agent

    async def delete_agent(self, agent_id: str) -> None:
        """Delete an agent (``ConflictError`` while it has pending, running or blocked executions)."""
        await self._delete(f"/v0/agents/{_q(agent_id)}")

    async def set_policy(self, agent_id: str, bundle: str) -> None:
        """Make ``bundle`` (policy YAML) the agent's policy."""
        await self._post(f"/v0/policies/{_q(agent_id)}", {"bundle": bundle}, idempotent=True)

    async def get_policy(self, agent_id: str) -> dict[str, Any]:
        """The agent's policy: ``bundle``, ``default_action`` and ``rules`` in evaluation order."""
        pol: dict[str, Any] = await self._get(f"/v0/policies/{_q(agent_id)}")
        return pol

    async def test_policy(self, agent_id: str, cases: builtins.list[dict[str, Any]] | None = None, *,
                          bundle: str | None = None, execution_id: str | None = None) -> dict[str, Any]:
        """Dry-run steps against the agent's policy (or ``bundle``): upstream's report
        ``{results: [{..., decision, rule_id, reason, rule, pass, failure?}], failed,
        unexercised_rules?}``. Give ``cases`` (``{target, kind?, args?, expect?,
        expect_rule?}``) or ``execution_id`` (replay its recorded steps)."""
        body = _body(cases=cases, bundle=bundle, execution_id=execution_id)
        report: dict[str, Any] = await self._post(f"/v0/policies/{_q(agent_id)}/test", body, idempotent=True)
        return report

    async def create_api_key(self, name: str, scopes: builtins.list[str]) -> dict[str, Any]:
        """A scoped key; the reply's ``token`` is shown only this once."""
        key: dict[str, Any] = await self._post("/v0/api-keys", {"name": name, "scopes": scopes})
        return key

    async def api_keys(self) -> builtins.list[dict[str, Any]]:
        """Every key made at run time (no tokens), revoked ones included."""
        keys: builtins.list[dict[str, Any]] = await self._get("/v0/api-keys") or []
        return keys

    async def rotate_api_key(self, key_id: str) -> dict[str, Any]:
        """A new token for the key (same id and scopes); the old one stops working."""
        key: dict[str, Any] = (await self._t.request("POST", f"/v0/api-keys/{_q(key_id)}/rotate",
                                                     retry_for=self.retry_for)).json()
        return key

    async def revoke_api_key(self, key_id: str) -> None:
        """Stop the key working (repeatable)."""
        await self._delete(f"/v0/api-keys/{_q(key_id)}")

    async def health(self) -> bool:
        """Whether the kernel answers ``GET /v0/health``."""
        try:
            data = (await self._t.request("GET", "/v0/health", retry_for=0)).json()
            return isinstance(data, dict) and data.get("status") == "ok"
        except Exception:
            return False


class SyncClient:
    """The blocking twin of :class:`Client` (same methods, same arguments).

    It runs a private event loop in a daemon thread, so it works from any thread,
    including from synchronous tools. ``watch`` returns a plain iterator.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, timeout: float = 35.0,
                 retry_for: float = 10.0):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rebuno-sync-client", daemon=True)
        self._thread.start()
        try:
            self._client = self._run(self._make(base_url, api_key, timeout, retry_for))
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()
            raise
        self.base_url = self._client.base_url

    @staticmethod
    async def _make(base_url: str | None, api_key: str | None, timeout: float, retry_for: float) -> Client:
        return Client(base_url, api_key, timeout=timeout, retry_for=retry_for)

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close connections and stop the private loop."""
        if self._loop.is_closed():
            return
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def create(self, agent: str, input: Any = None, **kw: Any) -> Execution:
        """See :meth:`Client.create`."""
        return self._run(self._client.create(agent, input, **kw))

    def get(self, execution_id: str) -> Execution:
        """See :meth:`Client.get`."""
        return self._run(self._client.get(execution_id))

    def list(self, **kw: Any) -> ExecutionPage:
        """See :meth:`Client.list`."""
        return self._run(self._client.list(**kw))

    def cancel(self, execution_id: str, reason: str | None = None) -> Execution:
        """See :meth:`Client.cancel`."""
        return self._run(self._client.cancel(execution_id, reason))

    def events(self, execution_id: str, **kw: Any) -> builtins.list[Event]:
        """See :meth:`Client.events`."""
        return self._run(self._client.events(execution_id, **kw))

    def steps(self, execution_id: str) -> builtins.list[Step]:
        """See :meth:`Client.steps`."""
        return self._run(self._client.steps(execution_id))

    def list_steps(self, execution_id: str, *, status: str = "") -> builtins.list[Step]:
        """See :meth:`Client.list_steps`."""
        return self._run(self._client.list_steps(execution_id, status=status))

    def get_step(self, execution_id: str, step_id: str) -> Step:
        """See :meth:`Client.get_step`."""
        return self._run(self._client.get_step(execution_id, step_id))

    def previous(self, execution_id: str) -> Any:
        """See :meth:`Client.previous`."""
        return self._run(self._client.previous(execution_id))

    def resources(self, execution_id: str) -> builtins.list[ResourceView]:
        """See :meth:`Client.resources`."""
        return self._run(self._client.resources(execution_id))

    def fork(self, execution_id: str, at_seq: int, session: str | None = None) -> Execution:
        """See :meth:`Client.fork`."""
        return self._run(self._client.fork(execution_id, at_seq, session=session))

    def fork_points(self, execution_id: str, **kw: Any) -> ForkPoints:
        """See :meth:`Client.fork_points`."""
        return self._run(self._client.fork_points(execution_id, **kw))

    def watch(self, execution_id: str, **kw: Any) -> Iterator[Event]:
        """See :meth:`Client.watch` (a blocking iterator)."""
        agen = self._client.watch(execution_id, **kw)

        async def next_event() -> Event:
            return await agen.__anext__()

        async def close() -> None:
            await agen.aclose()

        try:
            while True:
                try:
                    yield self._run(next_event())
                except StopAsyncIteration:
                    return
        finally:
            self._run(close())

    def wait(self, execution_id: str, **kw: Any) -> Execution:
        """See :meth:`Client.wait`."""
        return self._run(self._client.wait(execution_id, **kw))

    def approvals(self, **kw: Any) -> builtins.list[Approval]:
        """See :meth:`Client.approvals`."""
        return self._run(self._client.approvals(**kw))

    list_approvals = approvals

    def get_approval(self, approval_id: str) -> Approval:
        """See :meth:`Client.get_approval`."""
        return self._run(self._client.get_approval(approval_id))

    def approve(self, approval_id: str, *, by: str, reason: str | None = None) -> Approval:
        """See :meth:`Client.approve`."""
        return self._run(self._client.approve(approval_id, by=by, reason=reason))

    def deny(self, approval_id: str, *, by: str, reason: str | None = None) -> Approval:
        """See :meth:`Client.deny`."""
        return self._run(self._client.deny(approval_id, by=by, reason=reason))

    def grant_approval(self, approval_id: str, *, decided_by: str, rationale: str = "") -> Approval:
        """See :meth:`Client.grant_approval`."""
        return self._run(self._client.grant_approval(approval_id, decided_by=decided_by, rationale=rationale))

    def deny_approval(self, approval_id: str, *, decided_by: str, rationale: str = "") -> Approval:
        """See :meth:`Client.deny_approval`."""
        return self._run(self._client.deny_approval(approval_id, decided_by=decided_by, rationale=rationale))

    def agents(self) -> builtins.list[dict[str, Any]]:
        """See :meth:`Client.agents`."""
        return self._run(self._client.agents())

    def get_agent(self, agent_id: str) -> dict[str, Any]:
        """See :meth:`Client.get_agent`."""
        return self._run(self._client.get_agent(agent_id))

    def register_agent(self, agent_id: str, **kw: Any) -> dict[str, Any]:
        """See :meth:`Client.register_agent`."""
        return self._run(self._client.register_agent(agent_id, **kw))

    def delete_agent(self, agent_id: str) -> None:
        """See :meth:`Client.delete_agent`."""
        self._run(self._client.delete_agent(agent_id))

    def set_policy(self, agent_id: str, bundle: str) -> None:
        """See :meth:`Client.set_policy`."""
        self._run(self._client.set_policy(agent_id, bundle))

    def get_policy(self, agent_id: str) -> dict[str, Any]:
        """See :meth:`Client.get_policy`."""
        return self._run(self._client.get_policy(agent_id))

    def test_policy(self, agent_id: str, cases: builtins.list[dict[str, Any]] | None = None,
                    **kw: Any) -> dict[str, Any]:
        """See :meth:`Client.test_policy`."""
        return self._run(self._client.test_policy(agent_id, cases, **kw))

    def create_api_key(self, name: str, scopes: builtins.list[str]) -> dict[str, Any]:
        """See :meth:`Client.create_api_key`."""
        return self._run(self._client.create_api_key(name, scopes))

    def api_keys(self) -> builtins.list[dict[str, Any]]:
        """See :meth:`Client.api_keys`."""
        return self._run(self._client.api_keys())

    def rotate_api_key(self, key_id: str) -> dict[str, Any]:
        """See :meth:`Client.rotate_api_key`."""
        return self._run(self._client.rotate_api_key(key_id))

    def revoke_api_key(self, key_id: str) -> None:
        """See :meth:`Client.revoke_api_key`."""
        self._run(self._client.revoke_api_key(key_id))

    def health(self) -> bool:
        """See :meth:`Client.health`."""
        return self._run(self._client.health())
