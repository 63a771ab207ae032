// execution.js - one execution: its header, a live timeline of every event grouped by step,
// its output or failure, and the other turns of its session. The timeline reads the log
// from its start in pages of 1000 (after_seq), the next page when the reader scrolls to its
// end (an IntersectionObserver on a "load more" button, which keyboard users press), and
// follows the event stream from the event the view was read at (Last-Event-ID), so nothing
// is missed or shown twice. What is shown is always the log's first N events with no gap:
// live events past the pages read wait until the pages reach them, and a step whose
// events straddle a page boundary is one entry that grows when the next page comes.
import { Component } from "preact";
import { useCallback, useEffect, useMemo, useRef, useState } from "preact/hooks";
import { get, qs, stream } from "./api.js";
import { html, Json, pretty, short, Status, TERMINAL, time } from "./util.js";
import { ApprovalCard, usePending } from "./approvals.js";
import { ForkPanel, ForkTree } from "./forks.js";

const PAGE = 1000;

function useExecution(id) {
  const [ex, setEx] = useState(null);
  const [events, setEvents] = useState([]);
  const [total, setTotal] = useState(0); // events the log has, as far as the page knows
  const [error, setError] = useState(null);
  const [live, setLive] = useState(false);
  const [loading, setLoading] = useState(false);
  const [failed, setFailed] = useState(null); // why the last page could not be read
  const refetch = useRef(null);
  const more = useRef(() => {});
  useEffect(() => {
    let alive = true;
    let stop = null;
    let pendingRefetch = null;
    let inflight = null; // the page being read
    let retry = null; // after a failed read: the same page again, later and later
    let backoff = 1000;
    let last = 0; // the newest event_seq known to exist
    const all = []; // events 1..all.length, in order (event_seq has no gaps)
    const ahead = new Map(); // event_seq -> event, past all.length (the stream's, or a page's overlap)
    const known = (n) => {
      if (n > last) (last = n), setTotal(n);
    };
    // take in events from anywhere; extend the gap-free prefix; show it if it grew
    const take = (evs) => {
      for (const ev of evs) {
        if (ev.event_seq > all.length) ahead.set(ev.event_seq, ev);
        known(ev.event_seq);
      }
      const had = all.length;
      while (ahead.has(all.length + 1)) {
        all.push(ahead.get(all.length + 1));
        ahead.delete(all.length);
      }
      if (all.length !== had) setEvents(all.slice());
    };
    const fetchPage = (after) =>
      get(`/v0/executions/${encodeURIComponent(id)}/events${qs({ after_seq: after, limit: PAGE })}`);
    // read the next page; while one is being read, the same promise (a press of the button
    // while the observer's read is under way waits for that one rather than doing nothing).
    // A failed read is tried again by itself after 1, 2, 4 … 30 s (a dropped connection
    // heals), and at once when the button is pressed.
    more.current = () => {
      if (inflight || all.length >= last) return inflight || Promise.resolve();
      clearTimeout(retry);
      setLoading(true);
      inflight = (async () => {
        try {
          const page = await fetchPage(all.length);
          if (!alive) return;
          if (!page.length) last = all.length; // the log is shorter than it said: stop asking
          take(page);
          setTotal(last);
          setFailed(null);
          backoff = 1000;
        } catch (err) {
          if (!alive) return;
          setFailed(err.message);
          retry = setTimeout(() => more.current(), backoff);
          backoff = Math.min(30000, backoff * 2);
        } finally {
          inflight = null;
          if (alive) setLoading(false);
        }
      })();
      return inflight;
    };
    refetch.current = () => {
      if (pendingRefetch) return;
      pendingRefetch = setTimeout(async () => {
        pendingRefetch = null;
        try {
          const e = await get(`/v0/executions/${encodeURIComponent(id)}`);
          if (alive) (setEx(e), known(e.last_seq));
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
        known(e.last_seq);
        await more.current(); // the first page; the rest as the reader scrolls
        if (!alive || TERMINAL.has(e.status)) return;
        // events committed after the view was read; kept until the pages reach them
        setLive(true);
        stop = stream(`/v0/executions/${encodeURIComponent(id)}/events/stream`, {
          lastId: e.last_seq,
          onEvent: (m) => {
            let ev;
            try {
              ev = JSON.parse(m.data);
            } catch {
              return;
            }
            if (!alive || ev.event_seq <= all.length || ahead.has(ev.event_seq)) return;
            take([ev]);
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
      clearTimeout(retry);
      stop && stop();
    };
  }, [id]);
  return { ex, events, total, error, live, loading, failed, loadMore: () => more.current() };
}

// The end of the timeline while the log has more: a button (Enter or a click reads the next
// page, then focus goes to the first new entry, where the reader goes on) that also reads
// it by itself once it comes within a screen of view. The observer is made anew after every
// page, so a screen tall enough to still show the button reads on; not after a failed read
// (the hook tries again with a growing delay, a click at once), so a kernel that fails is
// not asked again at every frame.
function More({ shown, total, entries, loading, failed, onMore }) {
  const ref = useRef(null);
  useEffect(() => {
    if (loading || failed || !ref.current || typeof IntersectionObserver === "undefined") return;
    const io = new IntersectionObserver((es) => es.some((x) => x.isIntersecting) && onMore(), { rootMargin: "0px 0px 100% 0px" });
    io.observe(ref.current);
    return () => io.disconnect();
  }, [loading, failed, shown]);
  async function click() {
    const n = entries;
    await onMore();
    setTimeout(() => document.querySelector(`.timeline > li:nth-child(${n + 1}) summary`)?.focus(), 0);
  }
  const next = Math.min(PAGE, total - shown);
  return html`<p class="more-wrap"><button ref=${ref} class="more" name="more-events" aria-disabled=${loading ? "true" : undefined}
      onClick=${click}>${loading ? `Reading events ${shown + 1}-${shown + next}…` : failed ? `Try again: the next ${next} events` : `Show the next ${next} events`}</button>
    <span class="help" aria-live="polite"> ${shown} of ${total} events shown</span>
    ${failed && html` <span role="alert" class="error inline">Cannot read events ${shown + 1}-${shown + next}: ${failed}</span>`}</p>`;
}

// One timeline item per step (all events carrying its step_id, at its first event's place),
// and one per other event. Built as events arrive (the list only grows at its end, so each
// page or live event costs its own events, not the whole log again): a step's item is
// replaced by a new object when it gains events, every other item stays the same object,
// so Entry re-renders only the items that changed.
function useGroups(events) {
  const st = useRef(null);
  return useMemo(() => {
    let s = st.current;
    if (!s || events.length < s.n || (s.n && events[s.n - 1] !== s.lastEv))
      s = st.current = { n: 0, items: [], at: new Map(), lastEv: null }; // another execution
    for (let i = s.n; i < events.length; i++) {
      const ev = events[i];
      const sid = ev.payload && ev.payload.step_id;
      if (sid && ev.type.startsWith("step.")) {
        const k = s.at.get(sid);
        if (k === undefined) {
          s.at.set(sid, s.items.length);
          s.items.push({ kind: "step", step_id: sid, events: [ev] });
        } else s.items[k] = { ...s.items[k], events: [...s.items[k].events, ev] };
      } else s.items.push({ kind: "event", ev });
    }
    s.n = events.length;
    s.lastEv = events[s.n - 1] || null;
    return s.items.slice();
  }, [events]);
}

// One timeline entry, rendered again only when its item changed (its "ago" times are as of
// then; the exact time is in their title).
class Entry extends Component {
  shouldComponentUpdate(next) {
    return next.it !== this.props.it || next.onFork !== this.props.onFork;
  }
  render({ it, onFork }) {
    return it.kind === "step" ? html`<${StepItem} g=${it} onFork=${onFork} />` : html`<${EventItem} ev=${it.ev} onFork=${onFork} />`;
  }
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
  return html`<li class="item step" data-step=${g.step_id} data-first=${g.events[0].event_seq} data-last=${lastEv.event_seq} data-events=${g.events.length}>
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
  return html`<li class=${`item ev ev-${cls}`} data-seq=${ev.event_seq}>
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
  const { ex, events, total, error, live, loading, failed, loadMore } = useExecution(id);
  const items = useGroups(events);
  const [forkAt, setForkAt] = useState(null);
  const steps = useMemo(() => items.reduce((n, i) => n + (i.kind === "step"), 0), [items]);
  const openFork = useCallback((seq) => {
    setForkAt(seq);
    setTimeout(() => document.getElementById("fork-panel")?.scrollIntoView({ block: "start" }), 0);
  }, []);
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
      <h2 id="tl-h">Timeline <span class="help">${events.length < total ? `(the first ${events.length} of ${total} events, ${steps} steps so far; the rest as you scroll)` : `(${events.length} events, ${steps} steps)`}</span></h2>
      <ol class="timeline" aria-live=${live && events.length >= total ? "polite" : "off"} aria-relevant="additions">
        ${items.map((it) => html`<${Entry} it=${it} key=${it.kind === "step" ? it.step_id : it.ev.event_seq} onFork=${openFork} />`)}
      </ol>
      ${events.length < total && html`<${More} shown=${events.length} total=${total} entries=${items.length} loading=${loading} failed=${failed} onMore=${loadMore} />`}
    </section>
  </article>`;
}
