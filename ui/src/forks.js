// forks.js - the fork form of an execution (before forking at an event it shows, per
// resource, which checkpoint the fork would restore from and whether that checkpoint covers
// the point, as `rebuno exec fork-points` reports it; then it forks and opens the fork) and
// the fork tree around an execution (forked from, forks of, recursively).
import { useEffect, useState } from "preact/hooks";
import { get, post, qs } from "./api.js";
import { html, short, Status, time } from "./util.js";

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

const TREE_MAX = 200; // executions shown in a fork tree at most
const TREE_DEPTH = 20;

// The fork tree around an execution: up its forked_from chain to the original, then every
// fork of each (GET …/forks), breadth first, at most TREE_MAX nodes.
async function forkTree(ex) {
  const chain = [ex];
  while (chain[0].forked_from && chain.length < TREE_DEPTH)
    chain.unshift(await get(`/v0/executions/${encodeURIComponent(chain[0].forked_from)}`));
  const root = { ex: chain[0], kids: [] };
  let level = [root];
  let n = 1;
  let cut = false;
  for (let depth = 0; level.length && depth < TREE_DEPTH; depth++) {
    const next = [];
    const lists = await Promise.all(level.map((node) => get(`/v0/executions/${encodeURIComponent(node.ex.id)}/forks${qs({ limit: 100 })}`)));
    level.forEach((node, i) => {
      for (const f of lists[i].slice().reverse()) { // oldest first, as they were made
        if (n >= TREE_MAX) {
          cut = true;
          break;
        }
        const kid = { ex: f, kids: [] };
        node.kids.push(kid);
        next.push(kid);
        n++;
      }
    });
    level = next;
  }
  return { root, n, cut };
}

function TreeNode({ node, current }) {
  const x = node.ex;
  const here = x.id === current;
  return html`<li>
    ${here ? html`<strong class="mono" aria-current="page">${short(x.id)} (this one)</strong>`
      : html`<a href=${`#/executions/${x.id}`} class="mono">${short(x.id)}</a>`}
    ${" "}<${Status} s=${x.status} />
    ${x.forked_from ? html` <span class="help">forked at #${x.fork_seq}</span>` : html` <span class="help">the original</span>`}
    ${" "}${time(x.created_at)}
    ${node.kids.length > 0 && html`<ul>${node.kids.map((k) => html`<${TreeNode} node=${k} current=${current} key=${k.ex.id} />`)}</ul>`}
  </li>`;
}

// Shown when the execution was forked from another or has forks of its own.
export function ForkTree({ ex }) {
  const [tree, setTree] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    let alive = true;
    forkTree(ex).then((t) => alive && setTree(t), (e) => alive && setError(e));
    return () => {
      alive = false;
    };
  }, [ex.id, ex.forked_from]);
  if (error) return html`<p role="alert" class="error">Cannot read the fork tree: ${error.message}</p>`;
  if (!tree || tree.n < 2) return null;
  return html`<section class="panel forktree" aria-labelledby="ftree-h">
    <h2 id="ftree-h">Fork tree <span class="help">(${tree.n} executions${tree.cut ? `, the first ${TREE_MAX} shown` : ""})</span></h2>
    <ul class="tree"><${TreeNode} node=${tree.root} current=${ex.id} /></ul>
  </section>`;
}
