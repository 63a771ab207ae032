// main.js - the dashboard's shell: sign-in (API key or local token, kept in sessionStorage),
// navigation, and a hash router (#/executions, #/executions/<id>, #/approvals, #/policies,
// #/sandboxes) so the kernel serves one page.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import "./style.css";
import { ApiError, auth, get, sbx, watchUnauthorized } from "./api.js";
import { html } from "./util.js";
import { Executions } from "./executions.js";
import { Execution } from "./execution.js";
import { Approvals, usePending } from "./approvals.js";
import { Sandbox, SandboxGate, Sandboxes } from "./sandboxes.js";
import { Policies, Policy } from "./policy.js";

// Which daemon serves this page: the kernel (/v0) or the sandbox service (/v1).
const service = fetch("service.json").then((r) => r.json()).then((j) => j, () => ({ service: "kernel" }));

function useRoute(home) {
  const [hash, setHash] = useState(location.hash || home);
  useEffect(() => {
    const f = () => setHash(location.hash || home);
    addEventListener("hashchange", f);
    return () => removeEventListener("hashchange", f);
  }, []);
  const [path, query = ""] = hash.slice(1).split("?");
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(query) };
}

function SignIn({ onDone, reason, svc }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState(reason || "");
  const [busy, setBusy] = useState(false);
  async function submit(e) {
    e.preventDefault();
    setBusy(true);
    setError("");
    auth.set(key.trim());
    try {
      await get(svc === "kernel" ? "/v0/executions?limit=1" : "/v1/sandboxes?limit=1", { noAuthEvent: true });
      onDone();
    } catch (err) {
      auth.clear();
      setError(
        err instanceof ApiError && err.status === 401
          ? `The kernel refused this key: ${err.message}`
          : err instanceof ApiError && err.status === 403
            ? `This key may not read executions: ${err.message}`
            : `Sign-in failed: ${err.message}`,
      );
    } finally {
      setBusy(false);
    }
  }
  return html`<main class="signin">
    <h1>rebuno</h1>
    <form onSubmit=${submit}>
      <label for="key">API key or local token</label>
      <input id="key" type="password" autocomplete="off" required value=${key}
        onInput=${(e) => setKey(e.target.value)} aria-describedby="key-help" autofocus />
      ${svc === "sandboxd" ? html`<p id="key-help" class="help">The sandbox service's local token: the <code>token</code> field of
        <code>local-token</code> in its state folder (<code>.rebuno/sandboxes/local-token</code> under <code>rebuno dev</code>).
        It is kept in this tab only (session storage).</p>` : html`<p id="key-help" class="help">An <code>api_keys:</code> key of the kernel's config, or, for <code>rebuno dev</code>
        without keys, its local token: the <code>token</code> field of <code>local-token</code> in the
        kernel's state folder (<code>.rebuno/local-token</code> by default). It is kept in this tab only (session storage).</p>`}
      ${error && html`<p role="alert" class="error" id="signin-error">${error}</p>`}
      <button type="submit" disabled=${busy}>Sign in</button>
    </form>
  </main>`;
}

function SandboxNav({ parts }) {
  return html`<header class="top">
    <a class="brand" href="#/sandboxes">rebuno sandboxes</a>
    <nav aria-label="Main"><a href="#/sandboxes" aria-current=${parts[0] === "sandboxes" && !parts[1] ? "page" : undefined}>Sandboxes</a></nav>
    <button class="link" onClick=${() => (auth.clear(), location.reload())}>Sign out</button>
  </header>`;
}

function Nav({ parts, sandboxes }) {
  const cur = parts[0] || "executions";
  const { list } = usePending(undefined);
  const link = (to, label) =>
    html`<a href=${`#/${to}`} aria-current=${cur === to ? "page" : undefined}>${label}</a>`;
  return html`<header class="top">
    <a class="brand" href="#/executions">rebuno</a>
    <nav aria-label="Main">${link("executions", "Executions")}
      <a href="#/approvals" aria-current=${cur === "approvals" ? "page" : undefined}>Approvals${list && list.length ? html` <span class="badge" aria-label=${`${list.length} pending`}>${list.length}</span>` : ""}</a>
      ${link("policies", "Policies")}
      ${sandboxes && link("sandboxes", "Sandboxes")}</nav>
    <button class="link" onClick=${() => (auth.clear(), location.reload())}>Sign out</button>
  </header>`;
}

function App({ svc, sandboxes }) {
  const [signedIn, setSignedIn] = useState(!!auth.get());
  const [reason, setReason] = useState("");
  const route = useRoute(svc === "kernel" ? "#/executions" : "#/sandboxes");
  useEffect(
    () =>
      watchUnauthorized((err) => {
        auth.clear();
        setReason(`The kernel refused the stored key: ${err.message}`);
        setSignedIn(false);
      }),
    [],
  );
  if (!signedIn) return html`<${SignIn} svc=${svc} reason=${reason} onDone=${() => (setReason(""), setSignedIn(true))} />`;
  const [view, id] = route.parts;
  if (svc === "sandboxd")
    return html`<${SandboxNav} parts=${route.parts} /><main id="main">${id ? html`<${Sandbox} name=${id} key=${id} />` : html`<${Sandboxes} />`}</main>`;
  let body;
  if ((view === "executions" || !view) && id) body = html`<${Execution} id=${id} key=${id} />`;
  else if (view === "approvals") body = html`<${Approvals} />`;
  else if (view === "sandboxes" && sandboxes)
    body = html`<${SandboxGate}>${id ? html`<${Sandbox} name=${id} key=${id} />` : html`<${Sandboxes} />`}<//>`;
  else if (view === "policies") body = id ? html`<${Policy} agent=${id} key=${id} />` : html`<${Policies} />`;
  else body = html`<${Executions} query=${route.query} />`;
  return html`<${Nav} parts=${route.parts} sandboxes=${sandboxes} /><main id="main">${body}</main>`;
}

service.then((s) => {
  if (s.service === "kernel" && s.sandboxes_api) sbx.base = s.sandboxes_api; // sandboxd's /v1, from the browser
  render(html`<${App} svc=${s.service} sandboxes=${!!s.sandboxes_api} />`, document.getElementById("app"));
});
