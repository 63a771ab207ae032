// forks.js - the fork form of an execution: before forking at an event it shows, per
// resource, which checkpoint the fork would restore from and whether that checkpoint covers
// the point (the kernel's rule, as `rebuno exec fork-points` reports it), then creates the
// fork and opens it.
import { useEffect, useState } from "preact/hooks";
import { get, post, qs } from "./api.js";
import { html } from "./util.js";

const PAGE = 10000;

// Every page of fork-points (events after `after` until latest_seq), merged.
export async function forkPoints(id) {
  let all = null;
  let after = 0;
  for (;;) {
    const p = await get(`/v0/executions/${encodeURIComponent(id)}/fork-points${qs({ after, limit: PAGE })}`);
    const evs = p.events || [];
    if (!all) all = p;
    else {
      all.events.push(...evs);
      all.latest_seq = p.latest_seq;
      all.resources = p.resources;
      all.checkpoints = p.checkpoints;
    }
    if (!evs.length) break;
    after = evs[evs.length - 1].event_seq;
    if (after >= all.latest_seq) break;
  }
  return all;
}

const covers = (c, seq) => c.covered_seq <= seq && (!c.invalidated_seq || seq < c.invalidated_seq);

// What a fork at `at` restores, per resource registered by then: the checkpoint covering
// `at`, else the newest earlier one, else nothing (a fresh resource).
export function restorationAt(fp, at) {
  const out = [];
  for (const [key, reg] of Object.entries(fp.resources || {})) {
    if (reg > at) continue;
    let best = null;
    let covering = false;
    for (const c of fp.checkpoints || []) {
      if (c.key !== key || c.covered_seq > at) continue;
      const cv = covers(c, at);
      if (best && covering && !cv) continue;
      if (best && cv === covering && c.covered_seq < best.covered_seq) continue;
      best = c;
      covering = cv;
    }
    out.push({ key, checkpoint_ref: best ? best.checkpoint_ref : null, checkpoint_seq: best ? best.covered_seq : null, covered: covering });
  }
  return out.sort((a, b) => (a.key < b.key ? -1 : 1));
}

export function ForkPanel({ ex, at, setAt, onClose }) {
  const [fp, setFp] = useState(null);
  const [error, setError] = useState(null);
  const [session, setSession] = useState("");
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    forkPoints(ex.id).then(setFp, setError);
  }, [ex.id, ex.last_seq]);
  const point = fp && fp.events.find((e) => e.event_seq === at);
  const rest = fp ? restorationAt(fp, at) : [];
  async function create(e) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const body = { at_seq: at };
      if (session.trim()) body.session = session.trim();
      const f = await post(`/v0/executions/${encodeURIComponent(ex.id)}/fork`, body);
      location.hash = `#/executions/${f.id}`;
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }
  return html`<section class="panel fork" aria-labelledby="fork-h" id="fork-panel">
    <h2 id="fork-h">Fork at event #${at}</h2>
    <form onSubmit=${create} class="decide">
      <label>At event
        <input type="number" name="at_seq" min="1" max=${ex.last_seq} value=${at} required
          onInput=${(e) => { const v = parseInt(e.target.value, 10); if (v >= 1 && v <= ex.last_seq) setAt(v); }} />
      </label>
      <label>New session <input name="session" value=${session} onInput=${(e) => setSession(e.target.value)} placeholder="optional, must be new" /></label>
      <button type="submit" disabled=${busy || !fp}>Fork and open</button>
      <button type="button" onClick=${onClose}>Close</button>
    </form>
    ${error && html`<p role="alert" class="error">${error.message}</p>`}
    ${!fp && !error && html`<p aria-live="polite">Reading fork points…</p>`}
    ${fp && html`<div aria-live="polite">
      <p class="point">${point ? html`#${at} <strong>${point.type}</strong>${point.target ? ` ${point.target}` : ""}: ` : ""}
        ${rest.length === 0
          ? html`<span class="cov">no resources registered by this point: the fork reruns from the recorded steps</span>`
          : point && point.covered
            ? html`<span class="cov ok" data-covered="true">covered: every resource restores a checkpoint taken at this point</span>`
            : html`<span class="cov bad" data-covered="false">not covered: copied results up to here may describe changes the restored resources lack</span>`}</p>
      ${rest.length > 0 && html`<table class="list restore">
        <caption class="help">What the fork restores</caption>
        <thead><tr><th scope="col">Resource</th><th scope="col">Restores from</th><th scope="col">Checkpoint at</th><th scope="col">Covers #${at}</th></tr></thead>
        <tbody>${rest.map((r) => html`<tr data-key=${r.key}>
          <td>${r.key}</td><td class="mono ref">${r.checkpoint_ref || "nothing: starts fresh"}</td>
          <td>${r.checkpoint_seq ? `#${r.checkpoint_seq}` : "-"}</td><td class="covered">${r.covered ? "yes" : "no"}</td></tr>`)}</tbody>
      </table>`}
    </div>`}
  </section>`;
}
