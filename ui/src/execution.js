// execution.js - one execution: its header, a live timeline of every event grouped by step,
// its output or failure, and the other turns of its session. Events are read in pages of
// 1000, then followed over the event stream from the last one (Last-Event-ID), so nothing is
// missed or shown twice.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { get, qs, stream } from "./api.js";
import { html, Json, pretty, short, Status, TERMINAL, time } from "./util.js";
import { ApprovalCard, usePending } from "./approvals.js";
import { ForkPanel, ForkTree } from "./forks.js";

const PAGE = 1000;
const WINDOW = 300; // timeline items rendered at first; more on request

const pageStarts = (last) => Array.from({ length: Math.max(1, Math.ceil(last / PAGE)) }, (_, i) => i * PAGE);

function useExecution(id) {
  const [ex, setEx] = useState(null);
  const [events, setEvents] = useState([]);
  const [error, setError] = useState(null);
  const [live, setLive] = useState(false);
  const [partial, setPartial] = useState(false);
  const refetch = useRef(null);
  useEffect(() => {
    let alive = true;
    let stop = null;
    let pendingRefetch = null;
    const all = [];
    const seen = new Set();
    refetch.current = () => {
      if (pendingRefetch) return;
      pendingRefetch = setTimeout(async () => {
        pendingRefetch = null;
        try {
          const e = await get(`/v0/executions/${encodeURIComponent(id)}`);
          if (alive) setEx(e);
        } catch (err) {
          if (alive) setError(err);
        }
      }, 150);
    };
    (async () => {
      try {
        const e = await get(`/v0/executions/${encodeURIComponent(id)}`);
        if (!alive) return;
        setEx(e);
        // the newest two pages first (what the timeline shows at first), then all the older
        // ones at once (the view says how many events there are); merged in seq order
        const starts = pageStarts(e.last_seq);
        const fetchPage = (after) =>
          get(`/v0/executions/${encodeURIComponent(id)}/events${qs({ after_seq: after, limit: PAGE })}`);
        const add = (pages) => {
          for (const page of pages)
            for (const ev of page) if (!seen.has(ev.event_seq)) (seen.add(ev.event_seq), all.push(ev));
          all.sort((x, y) => x.event_seq - y.event_seq);
        };
        const newest = starts.slice(-2);
        const older = starts.slice(0, -2);
        add(await Promise.all(newest.map(fetchPage)));
        if (!alive) return;
        if (older.length) {
          setPartial(true);
          setEvents(all.slice());
          // only now: the kernel serves one request at a time, the older pages would delay these
          add(await Promise.all(older.map(fetchPage)));
          if (!alive) return;
          setPartial(false);
        }
        // events that committed after the view was read arrive over the stream below
        setEvents(all.slice());
        const last = all.length ? all[all.length - 1].event_seq : 0;
        if (TERMINAL.has(e.status)) return;
        setLive(true);
        stop = stream(`/v0/executions/${encodeURIComponent(id)}/events/stream`, {
          lastId: last,
          onEvent: (m) => {
            let ev;
            try {
              ev = JSON.parse(m.data);
            } catch {
              return;
            }
            if (!alive || seen.has(ev.event_seq)) return;
            seen.add(ev.event_seq);
            all.push(ev);
            setEvents(all.slice());
            if (!ev.type.startsWith("step.") || ev.type === "step.awaiting_approval") refetch.current();
          },
          onEnd: () => alive && (setLive(false), refetch.current()),
          onError: (err) => alive && setError(err),
        });
      } catch (err) {
        if (alive) setError(err);
      }
    })();
    return () => {
      alive = false;
      clearTimeout(pendingRefetch);
      stop && stop();
    };
  }, [id]);
  return { ex, events, error, live, partial };
}

// One timeline item per step (all events carrying its step_id, at its first event's place),
// and one per other event.
function group(events) {
  const items = [];
  const steps = new Map();
  for (const ev of events) {
    const sid = ev.payload && ev.payload.step_id;
    if (sid && ev.type.startsWith("step.")) {
      let g = steps.get(sid);
      if (!g) {
        g = { kind: "step", step_id: sid, events: [] };
        steps.set(sid, g);
        items.push(g);
      }
      g.events.push(ev);
    } else items.push({ kind: "event", ev });
  }
  return items;
}

function lastMessage(args) {
  const msgs = args && (args.messages || args.input);
  if (Array.isArray(msgs) && msgs.length) {
    const m = msgs[msgs.length - 1];
    return typeof m === "string" ? m : m.content !== undefined ? pretty(m.content) : pretty(m);
  }
  if (args && typeof args.prompt === "string") return args.prompt;
  return null;
}

function answer(result) {
  if (result == null) return null;
  if (typeof result === "string") return result;
  if (typeof result.content === "string") return result.content;
  const c = result.choices && result.choices[0];
  if (c && c.message) return pretty(c.message.content ?? c.message);
  if (typeof result.text === "string") return result.text;
  return null;
}

const ForkBtn = ({ seq, onFork }) =>
  html`<button class="link forkbtn" onClick=${(e) => (e.preventDefault(), onFork(seq))} aria-label=${`Fork at event ${seq}`}>fork…</button>`;

// A <details> whose body is only built once opened: a long timeline stays a light DOM.
function Lazy({ summary, body }) {
  const [open, setOpen] = useState(false);
  return html`<details onToggle=${(e) => setOpen(e.target.open)}>${summary}${open ? body() : null}</details>`;
}

function StepItem({ g, onFork }) {
  const first = g.events[0].payload;
  const lastEv = g.events[g.events.length - 1];
  const kind = first.kind || "";
  const target = first.target || "";
  const args = first.args;
  const done = g.events.find((e) => e.type === "step.succeeded" || e.type === "step.failed");
  const decision = g.events.find((e) => e.type === "step.allowed" || e.type === "step.denied" || e.type === "step.awaiting_approval");
  const state = lastEv.type.replace("step.", "");
  const isLlm = kind === "llm_call";
  const q = isLlm ? lastMessage(args) : null;
  const a = isLlm && done ? answer(done.payload.result) : null;
  return html`<li class="item step">
    <${Lazy} summary=${html`<summary>
        <span class="seq">#${g.events[0].event_seq}</span>
        <span class="kind">${kind.replace("_", " ")}</span>
        <strong class="target">${target}</strong>
        <span class=${`status st-${state}`}>${state}</span>
        ${decision && decision.payload.rule_id && html`<span class="rule">rule ${decision.payload.rule_id}</span>`}
        <span class="when">${time(g.events[0].occurred_at)}</span>
        <${ForkBtn} seq=${lastEv.event_seq} onFork=${onFork} />
      </summary>`} body=${() => html`
      ${isLlm && q !== null && html`<div class="msg"><h4>Last message</h4><pre>${q}</pre></div>`}
      ${isLlm && a !== null && html`<div class="msg"><h4>Answer</h4><pre>${a}</pre></div>`}
      ${!isLlm && args !== undefined && html`<h4>Arguments</h4><${Json} value=${args} label="arguments" />`}
      ${decision && html`<p class="decision">Policy: <strong>${decision.type.replace("step.", "")}</strong>${decision.payload.rule_id ? ` by rule ${decision.payload.rule_id}` : ""}${decision.payload.reason ? ` - ${decision.payload.reason}` : ""}</p>`}
      ${done && done.type === "step.succeeded" && html`<h4>Result</h4><${Json} value=${done.payload.result} label="result" />`}
      ${done && done.type === "step.failed" && html`<h4>Error</h4><${Json} value=${done.payload.error} label="error" />`}
      <ol class="sub">
        ${g.events.map((e) => html`<li><span class="seq">#${e.event_seq}</span> ${e.type} ${time(e.occurred_at)} <${ForkBtn} seq=${e.event_seq} onFork=${onFork} /></li>`)}
      </ol>`} />
  </li>`;
}

function describe(ev) {
  const p = ev.payload || {};
  switch (ev.type) {
    case "dispatch.queued":
      return `attempt ${p.attempt ?? ""} queued${p.reason ? ` (${p.reason})` : ""}`;
    case "dispatch.claimed":
      return `attempt ${p.attempt ?? ""} claimed by worker ${short(p.worker_id)}`;
    case "dispatch.expired":
      return `attempt ${p.attempt ?? ""} lease expired`;
    case "resource.checkpointed":
      return `${p.key} generation ${p.generation}: ${p.checkpoint_ref || ""}`;
    case "approval.requested":
    case "approval.granted":
    case "approval.denied":
      return [p.target, p.rule_id && `rule ${p.rule_id}`, p.reason || p.rationale, p.decided_by && `by ${p.decided_by}`]
        .filter(Boolean).join(" · ");
    case "execution.failed":
      return p.reason || p.error || "";
    default:
      return "";
  }
}

function EventItem({ ev, onFork }) {
  const cls = ev.type.split(".")[0];
  const d = describe(ev);
  const hasPayload = ev.payload && Object.keys(ev.payload).length > 0;
  return html`<li class=${`item ev ev-${cls}`}>
    <${Lazy} summary=${html`<summary>
        <span class="seq">#${ev.event_seq}</span>
        <span class="type">${ev.type}</span>
        <span class="desc">${d}</span>
        <span class="when">${time(ev.occurred_at)}</span>
        <${ForkBtn} seq=${ev.event_seq} onFork=${onFork} />
      </summary>`} body=${() => (hasPayload ? html`<${Json} value=${ev.payload} label="payload" />` : html`<p class="help">no payload</p>`)} />
  </li>`;
}

function Field({ k, children }) {
  return html`<div class="field"><dt>${k}</dt><dd>${children}</dd></div>`;
}

function Header({ ex, live }) {
  const d = ex.dispatch;
  return html`<header class="exhead">
    <h1>Execution <span class="mono">${ex.id}</span></h1>
    <dl class="fields">
      <${Field} k="Agent">${ex.agent_id}<//>
      <${Field} k="Status"><${Status} s=${ex.status} /> ${live && html`<span class="live" title="following the event stream">● live</span>`}<//>
      ${ex.session && html`<${Field} k="Session"><a href=${`#/executions?session=${encodeURIComponent(ex.session)}`}>${ex.session}</a><//>`}
      <${Field} k="Attempts">${d ? `${d.attempt} (${d.state})` : "-"}<//>
      ${d && d.lease_deadline && html`<${Field} k="Lease until">${time(d.lease_deadline)}<//>`}
      ${ex.deadline_at && html`<${Field} k="Deadline">${time(ex.deadline_at)}<//>`}
      ${ex.forked_from && html`<${Field} k="Forked from"><a href=${`#/executions/${ex.forked_from}`} class="mono">${short(ex.forked_from)}</a> at #${ex.fork_seq}<//>`}
      ${ex.parent_execution_id && html`<${Field} k="Previous turn"><a href=${`#/executions/${ex.parent_execution_id}`} class="mono">${short(ex.parent_execution_id)}</a><//>`}
      <${Field} k="Created">${time(ex.created_at)}<//>
      <${Field} k="Updated">${time(ex.updated_at)}<//>
      <${Field} k="Events">${ex.last_seq}<//>
    </dl>
  </header>`;
}

function Turns({ ex }) {
  const [turns, setTurns] = useState(null);
  useEffect(() => {
    if (!ex.session) return;
    get(`/v0/executions${qs({ session: ex.session, limit: 50 })}`).then((p) => setTurns(p.executions), () => {});
  }, [ex.session, ex.status]);
  if (!ex.session || !turns) return null;
  return html`<section aria-labelledby="turns-h" class="panel">
    <h2 id="turns-h">Session turns</h2>
    <ol class="turns">
      ${turns.slice().reverse().map((t) => html`<li>
        ${t.id === ex.id ? html`<strong class="mono">${short(t.id)}</strong> (this one)` : html`<a href=${`#/executions/${t.id}`} class="mono">${short(t.id)}</a>`}
        <${Status} s=${t.status} /> ${time(t.created_at)}</li>`)}
    </ol>
  </section>`;
}

function Pending({ id }) {
  const { list } = usePending(id);
  if (!list || !list.length) return null;
  return html`<section aria-labelledby="pend-h"><h2 id="pend-h">Waiting for approval</h2>
    ${list.map((ap) => html`<${ApprovalCard} ap=${ap} key=${ap.id} showExecution=${false} />`)}</section>`;
}

export function Execution({ id }) {
  const { ex, events, error, live, partial } = useExecution(id);
  const items = useMemo(() => group(events), [events]);
  const [forkAt, setForkAt] = useState(null);
  const [shown, setShown] = useState(WINDOW);
  const hidden = Math.max(0, items.length - shown);
  const openFork = (seq) => {
    setForkAt(seq);
    setTimeout(() => document.getElementById("fork-panel")?.scrollIntoView({ block: "start" }), 0);
  };
  if (error && !ex) return html`<p role="alert" class="error">Cannot load execution ${id}: ${error.message}</p>`;
  if (!ex) return html`<p aria-live="polite">Loading…</p>`;
  return html`<article>
    <p><a href="#/executions">← Executions</a></p>
    <${Header} ex=${ex} live=${live} />
    ${error && html`<p role="alert" class="error">${error.message}</p>`}
    ${ex.status === "blocked" && html`<${Pending} id=${ex.id} />`}
    ${ex.status === "completed" && html`<section class="panel outcome ok" aria-labelledby="out-h"><h2 id="out-h">Output</h2><${Json} value=${ex.output} label="output" /></section>`}
    ${ex.status === "failed" && html`<section class="panel outcome bad" aria-labelledby="out-h"><h2 id="out-h">Failure</h2><pre>${pretty(ex.failure_reason)}</pre></section>`}
    <section class="panel" aria-labelledby="input-h"><h2 id="input-h">Input</h2><${Json} value=${ex.input} label="input" /></section>
    <${Turns} ex=${ex} />
    <${ForkTree} ex=${ex} />
    ${forkAt !== null
      ? html`<${ForkPanel} ex=${ex} at=${forkAt} setAt=${setForkAt} onClose=${() => setForkAt(null)} />`
      : html`<p><button class="forkopen" onClick=${() => openFork(ex.last_seq)}>Fork this execution…</button> <span class="help">or pick an event's "fork…" in the timeline</span></p>`}
    <section aria-labelledby="tl-h">
      <h2 id="tl-h">Timeline <span class="help">${partial ? `(newest ${events.length} of ${ex.last_seq} events; reading the earlier ones…)` : `(${events.length} events, ${items.filter((i) => i.kind === "step").length} steps)`}</span></h2>
      ${hidden > 0 && html`<p><button class="more" onClick=${() => setShown(shown + 1000)}>Show ${Math.min(1000, hidden)} earlier of ${hidden} hidden entries</button></p>`}
      <ol class="timeline" aria-live="polite" aria-relevant="additions" start=${hidden + 1}>
        ${(hidden ? items.slice(hidden) : items).map((it) => (it.kind === "step" ? html`<${StepItem} g=${it} key=${it.step_id} onFork=${openFork} />` : html`<${EventItem} ev=${it.ev} key=${it.ev.event_seq} onFork=${openFork} />`))}
      </ol>
    </section>
  </article>`;
}
