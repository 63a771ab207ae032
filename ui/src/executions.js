// executions.js - the executions list: filters (agent, status, session, created after and
// before) kept in the URL, counts per status, cursor paging (the API's next_cursor; a stack
// of cursors for "newer"), and a live list: the list stream (GET /v0/executions/stream)
// tells of every execution created or changed; a row on screen is updated in place, and
// the page is read again (at most once a second) when a new one belongs on it. (The stream
// is the app's one list stream, filtered here.)
import { useEffect, useRef, useState } from "preact/hooks";
import { get, qs, watchExecutions } from "./api.js";
import { html, STATUSES, Status, time } from "./util.js";

const RELOAD_MS = 1000;

function setQuery(q) {
  const s = q.toString();
  location.hash = `#/executions${s ? `?${s}` : ""}`;
}

// <input type=datetime-local> speaks local time without a zone; the URL and the API UTC.
const pad = (n) => String(n).padStart(2, "0");
function toLocal(iso) {
  const d = new Date(iso);
  if (!iso || Number.isNaN(d.getTime())) return "";
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}
function fromLocal(v) {
  const d = new Date(v);
  return v && !Number.isNaN(d.getTime()) ? d.toISOString() : "";
}

export function Executions({ query }) {
  const agent = query.get("agent_id") || "";
  const status = query.get("status") || "";
  const session = query.get("session") || "";
  const after = query.get("created_after") || "";
  const before = query.get("created_before") || "";
  const cursor = query.get("cursor") || "";
  const [page, setPage] = useState(null);
  const [counts, setCounts] = useState(null);
  const [error, setError] = useState(null);
  const [live, setLive] = useState(false);
  const [agents, setAgents] = useState([]);
  const [sessionText, setSessionText] = useState(session);
  const back = useRef([]);

  useEffect(() => {
    get("/v0/agents").then((a) => setAgents(Array.isArray(a) ? a : []), () => {});
  }, []);
  useEffect(() => setSessionText(session), [session]);

  useEffect(() => {
    let alive = true;
    const ctl = new AbortController();
    let rows = [];
    const timers = {};
    async function loadPage() {
      try {
        const p = await get(`/v0/executions${qs({ agent_id: agent, status, session, created_after: after, created_before: before, cursor, limit: 50 })}`,
          { signal: ctl.signal });
        if (!alive) return;
        rows = p.executions;
        setPage(p);
        setError(null);
      } catch (e) {
        if (alive && e.name !== "AbortError") setError(e);
      }
    }
    async function loadCounts() {
      try {
        const c = await get(`/v0/executions/counts${qs({ agent_id: agent, session, created_after: after, created_before: before })}`,
          { signal: ctl.signal });
        if (alive) setCounts(c);
      } catch {
        /* the list says what is wrong */
      }
    }
    // at most one read of each a second, however fast the changes come
    const soon = (name, fn) => {
      if (!timers[name]) timers[name] = setTimeout(() => ((timers[name] = null), alive && fn()), RELOAD_MS);
    };
    const inRange = (x) => (!after || x.created_at >= after) && (!before || x.created_at < before);
    loadPage();
    loadCounts();
    let gap = false; // the stream was down: what changed meanwhile was not told
    const stop = watchExecutions((m) => {
      if (!alive) return;
      if (m.type === "down") (gap = true), setLive(false);
      else if (m.type === "ready") setLive(true);
      if (m.type === "resync" || (m.type === "ready" && gap)) {
        gap = false;
        soon("page", loadPage);
        soon("counts", loadCounts);
      } else if (m.type === "execution") {
        const x = m.row;
        if ((agent && x.agent_id !== agent) || (session && x.session !== session) || !inRange(x)) return;
        soon("counts", loadCounts);
        const i = rows.findIndex((r) => r.id === x.id);
        if (i >= 0 && (!status || x.status === status)) {
          // the row on screen: changed in place (the stream's row has no input or output)
          rows = rows.slice();
          rows[i] = { ...rows[i], ...x };
          setPage((p) => (p ? { ...p, executions: rows } : p));
        } else if (i >= 0 || (!cursor && (!status || x.status === status))) {
          soon("page", loadPage); // it left this filter, or it is new on the newest page
        }
      }
    });
    return () => {
      alive = false;
      Object.values(timers).forEach(clearTimeout);
      ctl.abort();
      stop();
    };
  }, [agent, status, session, after, before, cursor]);

  function change(key, value) {
    const q = new URLSearchParams(query);
    if (value) q.set(key, value);
    else q.delete(key);
    q.delete("cursor");
    back.current = [];
    setQuery(q);
  }
  function older() {
    const q = new URLSearchParams(query);
    back.current.push(cursor);
    q.set("cursor", page.next_cursor);
    setQuery(q);
  }
  function newer() {
    const q = new URLSearchParams(query);
    const prev = back.current.pop();
    if (prev) q.set("cursor", prev);
    else q.delete("cursor");
    setQuery(q);
  }

  const rows = page ? page.executions : [];
  return html`<section aria-labelledby="ex-h">
    <h1 id="ex-h">Executions</h1>
    <form class="filters" role="search" aria-label="Filter executions" onSubmit=${(e) => (e.preventDefault(), change("session", sessionText.trim()))}>
      <label>Agent
        <select name="agent_id" value=${agent} onChange=${(e) => change("agent_id", e.target.value)}>
          <option value="">all</option>
          ${[...new Set([...agents.map((a) => a.id), ...(agent ? [agent] : [])])].map((id) => html`<option value=${id}>${id}</option>`)}
        </select>
      </label>
      <fieldset class="statuses">
        <legend>Status${counts ? html` <span class="help">(${counts.total} in all)</span>` : ""}</legend>
        ${["", ...STATUSES].map(
          (s) => html`<label class=${`chip ${status === s ? "on" : ""}`}>
            <input type="radio" name="status" value=${s} checked=${status === s} onChange=${() => change("status", s)} />
            ${s || "all"}${counts ? html` <span class="count" data-status=${s || "all"}>${s ? counts.counts[s] : counts.total}</span>` : ""}</label>`,
        )}
      </fieldset>
      <label>Session
        <input name="session" value=${sessionText} placeholder="session id" onInput=${(e) => setSessionText(e.target.value)} />
      </label>
      <label>Created after
        <input type="datetime-local" name="created_after" value=${toLocal(after)} onChange=${(e) => change("created_after", fromLocal(e.target.value))} />
      </label>
      <label>Created before
        <input type="datetime-local" name="created_before" value=${toLocal(before)} onChange=${(e) => change("created_before", fromLocal(e.target.value))} />
      </label>
      <button type="submit">Filter</button>
      ${(agent || status || session || after || before) && html`<button type="button" class="link" onClick=${() => setQuery(new URLSearchParams())}>Clear filters</button>`}
    </form>
    ${error && html`<p role="alert" class="error">Cannot list executions: ${error.message}</p>`}
    <p class="summary" aria-live="polite">${page ? `${rows.length} shown${cursor ? " (an older page)" : ", newest first"}` : "Loading…"}
      ${live && html` <span class="live" title="following the list stream">● live</span>`}</p>
    <table class="list" aria-describedby="ex-h">
      <thead><tr><th scope="col">Execution</th><th scope="col">Agent</th><th scope="col">Status</th><th scope="col">Session</th><th scope="col">Attempt</th><th scope="col">Created</th><th scope="col">Updated</th></tr></thead>
      <tbody>
        ${rows.map(
          (x) => html`<tr data-id=${x.id}>
            <td><a href=${`#/executions/${x.id}`} class="mono">${x.id}</a></td>
            <td>${x.agent_id}</td>
            <td><${Status} s=${x.status} /></td>
            <td>${x.session ? html`<a href=${`#/executions?session=${encodeURIComponent(x.session)}`}>${x.session}</a>` : ""}</td>
            <td>${x.dispatch ? x.dispatch.attempt : ""}</td>
            <td>${time(x.created_at)}</td>
            <td>${time(x.updated_at)}</td>
          </tr>`,
        )}
        ${page && !rows.length && html`<tr><td colspan="7" class="empty">No executions${agent || status || session || after || before ? " match these filters" : " yet"}.</td></tr>`}
      </tbody>
    </table>
    <nav class="pager" aria-label="Pages">
      <button onClick=${newer} disabled=${!cursor}>← Newer</button>
      <button onClick=${older} disabled=${!page || !page.next_cursor}>Older →</button>
    </nav>
  </section>`;
}
