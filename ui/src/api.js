// api.js - the dashboard's only way to the kernel: fetch on /v0 with the key kept in
// sessionStorage as a Bearer token, upstream's error envelope turned into ApiError, and a
// Server-Sent Events reader over fetch (EventSource cannot send an Authorization header).
// The sandbox views call /v1 of the sandbox service through `sbx`: the page's own origin
// when sandboxd serves it, or, in the kernel's dashboard under `rebuno dev`, sandboxd's
// origin (service.json) with the sandbox service's own token, kept beside the kernel's.
const KEY = "rebuno.key";
const SBX_KEY = "rebuno.sandbox_key";

export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

export const auth = {
  get: () => sessionStorage.getItem(KEY),
  set: (k) => sessionStorage.setItem(KEY, k),
  clear: () => sessionStorage.removeItem(KEY),
};

// Listeners told when the kernel refuses the stored key (401), so the app shows the sign-in.
const onUnauthorized = new Set();
export const watchUnauthorized = (fn) => (onUnauthorized.add(fn), () => onUnauthorized.delete(fn));

function headers(extra, key) {
  const h = { Accept: "application/json", ...extra };
  const k = key !== undefined ? key : auth.get();
  if (k) h.Authorization = `Bearer ${k}`;
  return h;
}

async function toError(res) {
  let body = null;
  try {
    body = await res.json();
  } catch {
    /* not JSON */
  }
  // the kernel's envelope is {code, message, details: {field}}, sandboxd's /v1 one
  // {error: {code, message, field}}
  const o = body && typeof body === "object" ? body : {};
  const e = o.error && typeof o.error === "object" ? o.error : o;
  return new ApiError(res.status, e.code || `http_${res.status}`, e.message || `${res.status} ${res.statusText}`,
    (e.details && e.details.field) || e.field);
}

export async function api(method, path, body, opts = {}) {
  let res;
  try {
    res = await fetch(path, {
      method,
      headers: headers(body !== undefined ? { "Content-Type": "application/json" } : {}, opts.key),
      body: body !== undefined ? JSON.stringify(body) : undefined,
      signal: opts.signal,
    });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, "network", `cannot reach ${opts.who || "the kernel"}: ${e.message}`);
  }
  if (!res.ok) {
    const err = await toError(res);
    if (res.status === 401 && opts.onUnauthorized) opts.onUnauthorized(err);
    else if (res.status === 401 && !opts.noAuthEvent) onUnauthorized.forEach((fn) => fn(err));
    throw err;
  }
  if (res.status === 204) return null;
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path, opts) => api("GET", path, undefined, opts);

// The sandbox service's /v1 (see the top of the file).
const onSbxUnauthorized = new Set();
export const sbx = {
  base: "", // "" = this page's origin
  get cross() {
    return sbx.base !== "";
  },
  key: () => (sbx.cross ? sessionStorage.getItem(SBX_KEY) : auth.get()),
  setKey: (k) => sessionStorage.setItem(SBX_KEY, k),
  clearKey: () => sessionStorage.removeItem(SBX_KEY),
  watchUnauthorized: (fn) => (onSbxUnauthorized.add(fn), () => onSbxUnauthorized.delete(fn)),
  call(method, path, body, opts = {}) {
    if (!sbx.cross) return api(method, path, body, opts);
    return api(method, sbx.base + path, body, {
      ...opts, key: sbx.key(), who: "the sandbox service",
      onUnauthorized: opts.noAuthEvent ? () => {} : (err) => onSbxUnauthorized.forEach((fn) => fn(err)),
    });
  },
  get: (path, opts) => sbx.call("GET", path, undefined, opts),
  post: (path, body, opts) => sbx.call("POST", path, body ?? {}, opts),
  del: (path, opts) => sbx.call("DELETE", path, undefined, opts),
  // a URL of the service (for fetch of raw output) and its WebSocket origin
  url: (path) => sbx.base + path,
  wsBase() {
    const u = new URL(sbx.base || location.href);
    return `${u.protocol === "https:" ? "wss:" : "ws:"}//${u.host}`;
  },
};
export const post = (path, body, opts) => api("POST", path, body ?? {}, opts);

export function qs(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") p.set(k, String(v));
  const s = p.toString();
  return s ? `?${s}` : "";
}

// Read an SSE stream; onEvent({id, event, data}) per event. Returns a stop function.
// Reconnects with Last-Event-ID after a dropped connection until stopped or the server
// ends the stream on purpose (the kernel closes after an execution's terminal event).
export function stream(path, { lastId, onEvent, onError, onEnd }) {
  const ctl = new AbortController();
  let last = lastId;
  let stopped = false;
  (async () => {
    for (let tries = 0; !stopped; tries++) {
      try {
        const h = headers({ Accept: "text/event-stream" });
        if (last !== undefined && last !== null) h["Last-Event-ID"] = String(last);
        const res = await fetch(path, { headers: h, signal: ctl.signal });
        if (!res.ok) throw await toError(res);
        tries = 0;
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        let ev = { data: [] };
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let nl;
          while ((nl = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, nl).replace(/\r$/, "");
            buf = buf.slice(nl + 1);
            if (line === "") {
              if (ev.data.length) {
                if (ev.id !== undefined) last = ev.id;
                onEvent({ id: ev.id, event: ev.event, data: ev.data.join("\n") });
              }
              ev = { data: [] };
            } else if (line.startsWith(":")) {
              /* comment (keep-alive) */
            } else {
              const c = line.indexOf(":");
              const f = c < 0 ? line : line.slice(0, c);
              const v = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
              if (f === "data") ev.data.push(v);
              else if (f === "id") ev.id = v;
              else if (f === "event") ev.event = v;
            }
          }
        }
        onEnd && onEnd();
        return;
      } catch (e) {
        if (stopped || e.name === "AbortError") return;
        onError && onError(e);
        if (e instanceof ApiError && e.status >= 400 && e.status < 500) return;
        await new Promise((r) => setTimeout(r, Math.min(10000, 500 * 2 ** tries)));
      }
    }
  })();
  return () => {
    stopped = true;
    ctl.abort();
  };
}

// One list stream (GET /v0/executions/stream, unfiltered) shared by every view that wants
// to hear of changed executions: the list, the approvals inbox and the menu's count. A
// browser holds at most six connections to the kernel; one stream for all leaves room.
// subscribe(fn) -> unsubscribe; fn({type: "ready"|"resync"|"execution", row?}). A late
// subscriber to a stream already open gets "ready" at once.
const listSubs = new Set();
let listStop = null;
let listReady = false;
let listRetry = null;
function listEach(m) {
  for (const f of [...listSubs]) f(m);
}
function listOpen() {
  listStop = stream("/v0/executions/stream", {
    onEvent: (m) => {
      if (m.event === "ready") listReady = true;
      let row;
      if (m.event === "execution") {
        try {
          row = JSON.parse(m.data);
        } catch {
          return;
        }
      }
      listEach({ type: m.event, row });
    },
    onError: () => ((listReady = false), listEach({ type: "down" })), // the helper retries
    onEnd: () => {
      // the kernel ended it (it is stopping): open a new one while anyone listens
      listReady = false;
      listEach({ type: "down" });
      listRetry = setTimeout(() => ((listRetry = null), listSubs.size && listOpen()), 2000);
    },
  });
}
export function watchExecutions(fn) {
  listSubs.add(fn);
  if (listReady) fn({ type: "ready" });
  if (!listStop) listOpen();
  return () => {
    listSubs.delete(fn);
    if (!listSubs.size && listStop) {
      listStop();
      clearTimeout(listRetry);
      listStop = listRetry = null;
      listReady = false;
    }
  };
}
