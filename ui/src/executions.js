// executions.js - the executions list: filters (agent, status, session) kept in the URL,
// cursor paging (the API's next_cursor; a stack of cursors for "newer"), and a live first
// page refreshed every 2 s while the tab is visible (the list has no event stream).
import { useEffect, useRef, useState } from "preact/hooks";
import { get, qs } from "./api.js";
import { html, STATUSES, Status, time } from "./util.js";

const REFRESH_MS = 2000;

function setQuery(q) {
  const s = q.toString();
  location.hash = `#/executions${s ? `?${s}` : ""}`;
}

export function Executions({ query }) {
  const agent = query.get("agent_id") || "";
  const status = query.get("status") || "";
  const session = query.get("session") || "";
  const cursor = query.get("cursor") || "";
  const [page, setPage] = useState(null);
  const [error, setError] = useState(null);
  const [agents, setAgents] = useState([]);
  const [sessionText, setSessionText] = useState(session);
  const back = useRef([]);

  useEffect(() => {
    get("/v0/agents").then((a) => setAgents(Array.isArray(a) ? a : []), () => {});
  }, []);
  useEffect(() => setSessionText(session), [session]);

  useEffect(() => {
    let alive = true;
    let timer;
    const ctl = new AbortController();
    async function load() {
      try {
        const p = await get(`/v0/executions${qs({ agent_id: agent, status, session, cursor, limit: 50 })}`,
          { signal: ctl.signal });
        if (!alive) return;
        setPage(p);
        setError(null);
      } catch (e) {
        if (alive && e.name !== "AbortError") setError(e);
      }
      // only the newest page changes under the reader's eyes; older pages stay put
      if (alive && !cursor) timer = setTimeout(tick, REFRESH_MS);
    }
    function tick() {
      if (document.hidden) timer = setTimeout(tick, REFRESH_MS);
      else load();
    }
    load();
    return () => {
      alive = false;
      clearTimeout(timer);
      ctl.abort();
    };
  }, [agent, status, session, cursor]);

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
        <legend>Status</legend>
        ${["", ...STATUSES].map(
          (s) => html`<label class=${`chip ${status === s ? "on" : ""}`}>
            <input type="radio" name="status" value=${s} checked=${status === s} onChange=${() => change("status", s)} />
            ${s || "all"}</label>`,
        )}
      </fieldset>
      <label>Session
        <input name="session" value=${sessionText} placeholder="session id" onInput=${(e) => setSessionText(e.target.value)} />
      </label>
      <button type="submit">Filter</button>
      ${(agent || status || session) && html`<button type="button" class="link" onClick=${() => setQuery(new URLSearchParams())}>Clear filters</button>`}
    </form>
    ${error && html`<p role="alert" class="error">Cannot list executions: ${error.message}</p>`}
    <p class="summary" aria-live="polite">${page ? `${rows.length} shown${cursor ? " (older page)" : ", newest first, live"}` : "Loading…"}</p>
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
        ${page && !rows.length && html`<tr><td colspan="7" class="empty">No executions${agent || status || session ? " match these filters" : " yet"}.</td></tr>`}
      </tbody>
    </table>
    <nav class="pager" aria-label="Pages">
      <button onClick=${newer} disabled=${!cursor}>← Newer</button>
      <button onClick=${older} disabled=${!page || !page.next_cursor}>Older →</button>
    </nav>
  </section>`;
}
