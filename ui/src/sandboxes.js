// sandboxes.js - the Sandboxes views, in the dashboard `rebuno sandboxd` serves (same origin
// as its /v1) and in the kernel's under `rebuno dev` (sandboxd's /v1 from the browser, its
// origin let in by sandboxd's CORS, its token asked once: SandboxGate): the list with state,
// image, metadata and resources; one sandbox with its snapshots, commands and their output,
// actions (stop, pause, resume, delete after a confirmation dialog, in the list and on the
// sandbox's page; fork it, take a snapshot, a new sandbox from a snapshot); and a terminal (xterm.js) over the
// PTY WebSocket, authenticated with the "rebuno.bearer.<token>" subprotocol because a
// browser's WebSocket cannot send an Authorization header.
import { useEffect, useRef, useState } from "preact/hooks";
import "@xterm/xterm/css/xterm.css";
import { ApiError, qs, sbx } from "./api.js";
import { html, Json, short, time } from "./util.js";

const REFRESH_MS = 3000;

function usePoll(path, ms = REFRESH_MS) {
  const [data, setData] = useState(null);
  const [error, setError] = useState(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let alive = true;
    let timer;
    async function load() {
      try {
        const d = await sbx.get(path);
        if (alive) (setData(d), setError(null));
      } catch (e) {
        if (alive) setError(e);
      }
      if (alive && ms) timer = setTimeout(load, document.hidden ? 4 * ms : ms);
    }
    load();
    return () => {
      alive = false;
      clearTimeout(timer);
    };
  }, [path, tick]);
  return { data, error, setData, reload: () => setTick((t) => t + 1) };
}

// A button that runs one sandbox action (busy while it runs; its error shown beside it).
// While busy it is aria-disabled rather than disabled, so keyboard focus stays on it.
// report(message | null), when given, takes the error instead (a group shows it once, after itself).
function Action({ label, run, name, aria, disabled, why, report }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  async function go() {
    if (busy) return;
    setBusy(true);
    (report || setError)(null);
    try {
      await run();
    } catch (e) {
      (report || setError)(e.message);
    } finally {
      setBusy(false);
    }
  }
  return html`<span class="action"><button name=${name} aria-label=${aria} aria-disabled=${busy ? "true" : undefined}
      disabled=${disabled && !busy} title=${disabled ? why : undefined} onClick=${go}>${busy ? `${label}…` : label}</button>
    ${error && html` <span role="alert" class="error inline">${error}</span>`}</span>`;
}

// Delete, after a confirmation: a modal <dialog> (focus moves into it, on Cancel first;
// Escape or Cancel closes it and focus returns to the button; Tab stays inside).
function DeleteButton({ sb, onDeleted, compact }) {
  const dlg = useRef(null);
  const opener = useRef(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const id = `del-${sb.id}`;
  async function confirm(e) {
    e.preventDefault();
    if (busy) return;
    setBusy(true);
    setError(null);
    try {
      await sbx.del(`/v1/sandboxes/${encodeURIComponent(sb.name)}`);
      dlg.current.close();
      onDeleted(sb);
    } catch (err) {
      setError(err.message);
    } finally {
      setBusy(false);
    }
  }
  const closed = () => {
    const a = document.activeElement;
    if (opener.current && (!a || a === document.body)) opener.current.focus();
  };
  return html`<span class="action"><button name="delete" class="danger" aria-haspopup="dialog" ref=${opener}
      aria-label=${compact ? `Delete ${sb.name}…` : undefined}
      onClick=${() => (setError(null), dlg.current.showModal())}>Delete…</button>
    <dialog ref=${dlg} class="confirm" onClose=${closed} aria-labelledby=${`${id}-h`} aria-describedby=${`${id}-d`}>
      <form onSubmit=${confirm}>
        <h2 id=${`${id}-h`}>Delete sandbox ${sb.name}?</h2>
        <p id=${`${id}-d`}>It stops (every process ends) and its files are removed. Its snapshots stay. This cannot be undone.</p>
        ${error && html`<p role="alert" class="error">Cannot delete ${sb.name}: ${error}</p>`}
        <div class="buttons">
          <button type="button" name="cancel-delete" autofocus onClick=${() => dlg.current.close()}>Cancel</button>
          <button type="submit" name="confirm-delete" class="danger" aria-disabled=${busy ? "true" : undefined}>${busy ? "Deleting…" : `Delete ${sb.name}`}</button>
        </div>
      </form>
    </dialog></span>`;
}

// Stop, pause, resume and delete. A button the state does not allow is disabled (pausing a
// stopped sandbox would be 409 sandbox_stopped). Each call answers the sandbox, so
// onChange(sb) shows its new state at once (the 3 s poll follows changes made elsewhere).
// When the focused button turns disabled, focus moves to the one that undoes the action
// (Resume after Pause or Stop, Pause after Resume), not to Stop by chance.
function Lifecycle({ sb, onChange, onDeleted, compact }) {
  const box = useRef(null);
  const [error, setError] = useState(null);
  const s = sb.state;
  const undo = { stop: "resume", pause: "resume", resume: "pause" };
  const op = (o) => async () => {
    onChange(await sbx.post(`/v1/sandboxes/${encodeURIComponent(sb.name)}/${o}`, {}));
    setTimeout(() => {
      const a = document.activeElement;
      if (!box.current || (a && a !== document.body && !a.disabled)) return;
      (box.current.querySelector(`button[name=${undo[o]}]:not([disabled])`) || box.current.querySelector("button:not([disabled])"))?.focus();
    }, 0);
  };
  const one = (verb, o, ok) => html`<${Action} label=${verb} name=${o} aria=${compact ? `${verb} ${sb.name}` : undefined}
    disabled=${!ok} why=${`${sb.name} is ${s}`} run=${op(o)} report=${(m) => setError(m && `${verb} ${sb.name}: ${m}`)} />`;
  return html`<span class="lifecycle" role="group" aria-label=${`Actions on sandbox ${sb.name}`} ref=${box}>
    ${one("Stop", "stop", s === "running" || s === "paused")}
    ${one("Pause", "pause", s === "running")}
    ${one("Resume", "resume", s === "paused" || s === "stopped")}
    <${DeleteButton} sb=${sb} onDeleted=${onDeleted} compact=${compact} />
    ${error && html`<span role="alert" class="error inline">${error}</span>`}
  </span>`;
}

const openSandbox = (name) => (location.hash = `#/sandboxes/${encodeURIComponent(name)}`);

const res = (r) => (r ? `${r.vcpus} vCPU · ${r.memory} MiB · ${r.disk_mb} MiB disk · ${r.pids} pids` : "");
const meta = (m) => Object.entries(m || {}).map(([k, v]) => html`<span class="tag">${k}=${v}</span>`);
const State = ({ s }) => html`<span class=${`status sb-${s}`}>${s}</span>`;

export function Sandboxes() {
  const { data, error, setData } = usePoll("/v1/sandboxes?limit=1000");
  const rows = data ? data.sandboxes : [];
  const patch = (f) => setData((d) => d && { ...d, sandboxes: f(d.sandboxes) });
  const changed = (sb) => patch((l) => l.map((x) => (x.name === sb.name ? sb : x)));
  const deleted = (sb) => patch((l) => l.filter((x) => x.name !== sb.name));
  return html`<section aria-labelledby="sb-h">
    <h1 id="sb-h">Sandboxes</h1>
    ${error && html`<p role="alert" class="error">Cannot list sandboxes: ${error.message}</p>`}
    <p class="summary" aria-live="polite">${data ? `${rows.length} sandboxes, live` : "Loading…"}</p>
    <table class="list">
      <thead><tr><th scope="col">Name</th><th scope="col">State</th><th scope="col">Image</th><th scope="col">Metadata</th><th scope="col">Resources</th><th scope="col">Created</th><th scope="col">Expires</th><th scope="col">Actions</th></tr></thead>
      <tbody>
        ${rows.map((s) => html`<tr key=${s.name} data-name=${s.name}>
          <td><a href=${`#/sandboxes/${encodeURIComponent(s.name)}`}>${s.name}</a></td>
          <td><${State} s=${s.state} /></td><td>${s.image}</td><td>${meta(s.metadata)}</td>
          <td>${res(s.resources)}</td><td>${time(s.created_at)}</td><td>${time(s.expires_at)}</td>
          <td><${Lifecycle} sb=${s} onChange=${changed} onDeleted=${deleted} compact=${true} /></td></tr>`)}
        ${data && !rows.length && html`<tr><td colspan="8" class="empty">No sandboxes.</td></tr>`}
      </tbody>
    </table>
  </section>`;
}

function Output({ sb, cmd }) {
  const [out, setOut] = useState(null);
  useEffect(() => {
    let alive = true;
    (async () => {
      const base = `/v1/sandboxes/${encodeURIComponent(sb)}/commands/${encodeURIComponent(cmd.id)}/output`;
      const read = async (stream) => {
        const r = await fetch(sbx.url(`${base}${qs({ stream, limit: 65536 })}`), { headers: { Authorization: `Bearer ${sbx.key()}` } });
        return r.ok ? r.text() : `(${r.status})`;
      };
      const [o, e] = await Promise.all([read("stdout"), read("stderr")]);
      if (alive) setOut({ o, e });
    })();
    return () => (alive = false);
  }, [cmd.id, cmd.status]);
  if (!out) return html`<p>Loading output…</p>`;
  return html`<div class="cmdout">
    <h4>stdout</h4><pre class="stdout">${out.o || "(empty)"}</pre>
    ${out.e && html`<h4>stderr</h4><pre class="stderr">${out.e}</pre>`}
  </div>`;
}

function Commands({ name }) {
  const { data, error } = usePoll(`/v1/sandboxes/${encodeURIComponent(name)}/commands`);
  const [open, setOpen] = useState(null);
  const list = data ? data.commands || data : [];
  return html`<section class="panel" aria-labelledby="cmd-h"><h2 id="cmd-h">Commands</h2>
    ${error && html`<p role="alert" class="error">${error.message}</p>`}
    ${Array.isArray(list) && !list.length && html`<p class="empty">No commands yet.</p>`}
    <ul class="cmds">
      ${Array.isArray(list) && list.slice().reverse().map((c) => html`<li data-cmd=${c.id}>
        <button class="link" aria-expanded=${open === c.id} onClick=${() => setOpen(open === c.id ? null : c.id)}>
          <code>${[c.cmd, ...(c.args || [])].join(" ")}</code></button>
        <span class="status">${c.status}${c.exit_code !== undefined && c.exit_code !== null ? ` ${c.exit_code}` : ""}</span> ${time(c.started_at || c.created_at)}
        ${open === c.id && html`<${Output} sb=${name} cmd=${c} />`}
      </li>`)}
    </ul>
  </section>`;
}

function Snapshots({ name }) {
  const { data, error, reload } = usePoll(`/v1/snapshots${qs({ sandbox: name, limit: 100 })}`, 0);
  const list = data ? data.snapshots || [] : [];
  const take = async () => (await sbx.post(`/v1/sandboxes/${encodeURIComponent(name)}/snapshots`, {}), reload());
  const restore = async (id) => openSandbox((await sbx.post("/v1/sandboxes", { source: { type: "snapshot", snapshot_id: id } })).name);
  return html`<section class="panel" aria-labelledby="snap-h"><h2 id="snap-h">Snapshots</h2>
    <p><${Action} label="Take a snapshot" name="snapshot" run=${take} /></p>
    ${error && html`<p role="alert" class="error">${error.message}</p>`}
    ${data && !list.length && html`<p class="empty">No snapshots.</p>`}
    <ul class="snaps">${list.map((s) => html`<li data-snapshot=${s.id}><span class="mono">${s.id}</span> ${s.name || ""} ${time(s.created_at)}
      ${s.expires_at ? html` <span class="help">expires ${time(s.expires_at)}</span>` : ""}
      ${" "}<${Action} label="New sandbox from it" name="restore" run=${() => restore(s.id)} /></li>`)}</ul>
  </section>`;
}

function Term({ name }) {
  const box = useRef(null);
  const [state, setState] = useState("idle");
  const [error, setError] = useState(null);
  const ref = useRef({});
  async function open() {
    setError(null);
    setState("starting");
    const xterm = await import("@xterm/xterm"); // a CommonJS module: its exports may sit on default
    const Terminal = xterm.Terminal || xterm.default.Terminal;
    const term = new Terminal({ cols: 100, rows: 28, fontSize: 13, convertEol: false, cursorBlink: true });
    try {
      const pty = await sbx.post(`/v1/sandboxes/${encodeURIComponent(name)}/ptys`, { cols: 100, rows: 28 });
      const ws = new WebSocket(`${sbx.wsBase()}/v1/sandboxes/${encodeURIComponent(name)}/ptys/${pty.id}/ws`,
        ["rebuno", `rebuno.bearer.${sbx.key()}`]);
      ws.binaryType = "arraybuffer";
      term.open(box.current);
      ref.current = { term, ws };
      const enc = new TextEncoder();
      term.onData((d) => ws.readyState === 1 && ws.send(enc.encode(d)));
      term.onResize(({ cols, rows }) => ws.readyState === 1 && ws.send(JSON.stringify({ type: "resize", cols, rows })));
      let exited = false;
      ws.onopen = () => (setState("open"), term.focus());
      ws.onmessage = (m) => {
        if (typeof m.data === "string") {
          const msg = JSON.parse(m.data);
          if (msg.type === "exit") {
            exited = true;
            term.write(`\r\n[exited with code ${msg.code}${msg.signal ? `, signal ${msg.signal}` : ""}]\r\n`);
            setState("exited");
          } else if (msg.type === "error") setError(msg.message);
        } else term.write(new Uint8Array(m.data));
      };
      ws.onclose = () => {
        if (!exited) (setState("closed"), setError("The terminal's connection closed without an exit: it did not end normally."));
      };
    } catch (e) {
      term.dispose();
      setState("idle");
      setError(e.message);
    }
  }
  useEffect(() => () => {
    const { term, ws } = ref.current;
    ws && ws.close();
    term && term.dispose();
  }, []);
  return html`<section class="panel" aria-labelledby="term-h"><h2 id="term-h">Terminal</h2>
    ${state === "idle" && html`<button onClick=${open}>Open a terminal (bash)</button>`}
    <p class="help" aria-live="polite" id="term-state" data-state=${state}>${state === "open" ? "connected: keys go to the sandbox" : state}</p>
    ${error && html`<p role="alert" class="error">${error}</p>`}
    <div ref=${box} class="term" aria-label="terminal"></div>
  </section>`;
}

export function Sandbox({ name }) {
  const { data: sb, error, setData } = usePoll(`/v1/sandboxes/${encodeURIComponent(name)}`);
  if (error && !sb) return html`<p role="alert" class="error">Cannot load sandbox ${name}: ${error.message}</p>`;
  if (!sb) return html`<p>Loading…</p>`;
  return html`<article>
    <p><a href="#/sandboxes">← Sandboxes</a></p>
    ${error && html`<p role="alert" class="error">Cannot refresh sandbox ${name} (shown as last read): ${error.message}</p>`}
    <header class="exhead"><h1>Sandbox ${sb.name}</h1>
      <dl class="fields">
        <div class="field"><dt>State</dt><dd><${State} s=${sb.state} /></dd></div>
        <div class="field"><dt>Image</dt><dd>${sb.image}</dd></div>
        <div class="field"><dt>Id</dt><dd class="mono">${short(sb.id)}</dd></div>
        <div class="field"><dt>Resources</dt><dd>${res(sb.resources)}</dd></div>
        <div class="field"><dt>Metadata</dt><dd>${meta(sb.metadata)}</dd></div>
        ${sb.usage && html`<div class="field"><dt>Memory used</dt><dd>${Math.round(sb.usage.memory_bytes / 1048576)} MiB</dd></div>`}
        <div class="field"><dt>Created</dt><dd>${time(sb.created_at)}</dd></div>
        <div class="field"><dt>Expires</dt><dd>${time(sb.expires_at)}</dd></div>
      </dl>
    </header>
    <p><${Lifecycle} sb=${sb} onChange=${setData} onDeleted=${() => (location.hash = "#/sandboxes")} /></p>
    <p><${Action} label="Fork this sandbox" name="fork" run=${async () => openSandbox((await sbx.post(`/v1/sandboxes/${encodeURIComponent(sb.name)}/fork`, {})).name)} />
      <span class="help">a new sandbox from its files as they are now</span></p>
    <${Term} name=${sb.name} />
    <${Commands} name=${sb.name} />
    <${Snapshots} name=${sb.name} />
  </article>`;
}

export { Json };

// In the kernel's dashboard: the sandbox service has its own token; ask for it once (kept
// in this tab's session storage beside the kernel's key) and again when it is refused.
export function SandboxGate({ children }) {
  const [ok, setOk] = useState(!sbx.cross || !!sbx.key());
  const [error, setError] = useState("");
  const [token, setToken] = useState("");
  const [busy, setBusy] = useState(false);
  useEffect(
    () =>
      sbx.watchUnauthorized((err) => {
        sbx.clearKey();
        setError(`The sandbox service refused the stored token: ${err.message}`);
        setOk(false);
      }),
    [],
  );
  if (ok) return children;
  async function submit(e) {
    e.preventDefault();
    setBusy(true);
    setError("");
    sbx.setKey(token.trim());
    try {
      await sbx.get("/v1/sandboxes?limit=1", { noAuthEvent: true });
      setOk(true);
    } catch (err) {
      sbx.clearKey();
      setError(err instanceof ApiError && err.status === 401 ? `The sandbox service refused this token: ${err.message}`
        : `Cannot reach the sandbox service: ${err.message}`);
    } finally {
      setBusy(false);
    }
  }
  return html`<section aria-labelledby="sbkey-h" class="signin">
    <h1 id="sbkey-h">Sandboxes</h1>
    <form onSubmit=${submit}>
      <label for="sbkey">Sandbox service token</label>
      <input id="sbkey" type="password" autocomplete="off" required value=${token}
        onInput=${(e) => setToken(e.target.value)} aria-describedby="sbkey-help" />
      <p id="sbkey-help" class="help">The sandbox service (${sbx.base}) has a token of its own: the <code>token</code> field of
        <code>.rebuno/sandboxes/local-token</code> under <code>rebuno dev</code>. It is kept in this tab only (session storage).</p>
      ${error && html`<p role="alert" class="error" id="sbkey-error">${error}</p>`}
      <button type="submit" disabled=${busy}>Open the sandboxes</button>
    </form>
  </section>`;
}
