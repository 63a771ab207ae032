// approvals.js - the approvals inbox (every pending approval) and the card that grants or
// denies one with a reason, also shown on a blocked execution's page. Live: an approval is
// asked or settled as its execution turns blocked or leaves it, so the list stream's changes
// of such executions read the pending approvals again; a slow poll catches anything else
// (and stands in while the stream is down).
import { useEffect, useState } from "preact/hooks";
import { get, post, qs, watchExecutions } from "./api.js";
import { html, Json, short, time } from "./util.js";

const REFRESH_MS = 2000; // while the list stream is down
const SLOW_MS = 15000; // while it is up
const SOON_MS = 200;
const WHO = "rebuno.decided_by";

export function usePending(executionId) {
  const [list, setList] = useState(null);
  const [error, setError] = useState(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let alive = true;
    let timer;
    let live = false;
    let ids = new Set(); // executions with a pending approval shown
    let seq = 0; // reads started; only the newest one's answer is shown
    async function load() {
      clearTimeout(timer);
      const my = ++seq;
      try {
        const l = await get(`/v0/approvals${qs({ status: "pending", execution_id: executionId })}`);
        // two reads can overlap (a change on the stream while the poll's read is out) and
        // answer out of order: an older answer would take away a card just shown
        if (!alive || my !== seq) return;
        setList(l), setError(null), (ids = new Set(l.map((a) => a.execution_id)));
      } catch (e) {
        if (!alive || my !== seq) return;
        setError(e);
      }
      clearTimeout(timer);
      timer = setTimeout(load, live ? SLOW_MS : document.hidden ? 4 * REFRESH_MS : REFRESH_MS);
    }
    const soon = () => {
      clearTimeout(timer);
      timer = setTimeout(load, SOON_MS);
    };
    const stop = watchExecutions((m) => {
      if (m.type === "ready") (live = true), soon(); // after a gap, too: read what it missed
      else if (m.type === "down") (live = false), soon();
      else if (m.type === "resync") soon();
      else if (m.type === "execution" && (!executionId || m.row.id === executionId) &&
        (m.row.status === "blocked" || ids.has(m.row.id))) soon();
    });
    load();
    return () => {
      alive = false;
      clearTimeout(timer);
      stop();
    };
  }, [executionId, tick]);
  return { list, error, reload: () => setTick((t) => t + 1) };
}

export function ApprovalCard({ ap, onDecided, showExecution = true }) {
  const [who, setWho] = useState(localStorage.getItem(WHO) || "");
  const [why, setWhy] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const [done, setDone] = useState(null);
  const idp = `ap-${ap.id}`;
  async function decide(verb) {
    if (!who.trim()) {
      setError({ message: "Say who decides (decided by)." });
      return;
    }
    setBusy(true);
    setError(null);
    localStorage.setItem(WHO, who.trim());
    try {
      const body = { decided_by: who.trim() };
      if (why.trim()) body.rationale = why.trim();
      await post(`/v0/approvals/${encodeURIComponent(ap.id)}/${verb}`, body);
      setDone(verb === "grant" ? "granted" : "denied");
      onDecided && onDecided();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  }
  return html`<article class="panel approval" aria-labelledby=${`${idp}-h`} data-approval=${ap.id} data-execution=${ap.execution_id}>
    <h3 id=${`${idp}-h`}><span class="kind">${(ap.kind || "").replace("_", " ")}</span> <strong>${ap.target}</strong>
      ${showExecution && html` in <a href=${`#/executions/${ap.execution_id}`} class="mono">${short(ap.execution_id)}</a>`}</h3>
    <p>${ap.rule_id && html`Rule <strong>${ap.rule_id}</strong>`}${ap.reason ? `: ${ap.reason}` : ""}${ap.message ? ` - ${ap.message}` : ""}</p>
    <p class="help">asked ${time(ap.created_at)}, expires ${time(ap.timeout_at)}${ap.approvers ? `; approvers: ${ap.approvers.join(", ")}` : ""}</p>
    <h4>Arguments</h4>
    <${Json} value=${ap.args} label="arguments" />
    ${done
      ? html`<p role="status" class=${`decided st-${done}`}>${done} by ${who}</p>`
      : html`<div class="decide">
          <label>Decided by <input name="decided_by" value=${who} onInput=${(e) => setWho(e.target.value)} required autocomplete="username" /></label>
          <label class="grow">Reason <input name="rationale" value=${why} onInput=${(e) => setWhy(e.target.value)} placeholder="optional; the agent sees it on a denial" /></label>
          <button class="approve" disabled=${busy} onClick=${() => decide("grant")}>Approve</button>
          <button class="deny" disabled=${busy} onClick=${() => decide("deny")}>Deny</button>
        </div>`}
    ${error && html`<p role="alert" class="error">${error.message}</p>`}
  </article>`;
}

export function Approvals() {
  const { list, error, reload } = usePending(undefined);
  return html`<section aria-labelledby="ap-h">
    <h1 id="ap-h">Approvals</h1>
    <p class="summary" aria-live="polite">${list ? `${list.length} pending, live` : "Loading…"}</p>
    ${error && html`<p role="alert" class="error">Cannot list approvals: ${error.message}</p>`}
    ${list && !list.length && html`<p class="empty">Nothing waits for a decision.</p>`}
    ${list && list.map((ap) => html`<${ApprovalCard} ap=${ap} key=${ap.id} onDecided=${reload} />`)}
  </section>`;
}
