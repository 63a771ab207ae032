// policy.js - the policy view: every agent with whether it has a policy, one agent's policy
// (its rules in evaluation order and the YAML as given, GET /v0/policies/{agent}), and a
// dry-run box: paste a step, see the decision and the rule that made it (POST
// /v0/policies/{agent}/test; nothing is stored), or replay an execution's recorded steps to
// see which ones would be decided differently; either against an edited policy if asked.
import { useEffect, useState } from "preact/hooks";
import { get, post } from "./api.js";
import { html } from "./util.js";

const EXAMPLE = '{"kind": "tool_call", "target": "shell", "args": {"command": "rm -rf /tmp/x"}}';

export function Policies() {
  const [agents, setAgents] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    get("/v0/agents").then(setAgents, setError);
  }, []);
  return html`<section aria-labelledby="pol-h">
    <h1 id="pol-h">Policies</h1>
    ${error && html`<p role="alert" class="error">Cannot list agents: ${error.message}</p>`}
    ${!agents && !error && html`<p aria-live="polite">Loading…</p>`}
    ${agents && html`<table class="list">
      <thead><tr><th scope="col">Agent</th><th scope="col">Policy</th><th scope="col">Workers</th><th scope="col">Dispatch</th></tr></thead>
      <tbody>${agents.map((a) => html`<tr data-agent=${a.id}>
        <td><a href=${`#/policies/${encodeURIComponent(a.id)}`}>${a.id}</a></td>
        <td>${a.has_policy ? "yes" : html`<span class="help">none (every step allowed)</span>`}</td>
        <td>${a.workers ?? ""}</td><td>${a.dispatch || ""}</td></tr>`)}
        ${!agents.length && html`<tr><td colspan="4" class="empty">No agents yet.</td></tr>`}
      </tbody></table>`}
  </section>`;
}

function parseStep(text) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new Error(`the step is not JSON: ${e.message}`);
  }
  if (!v || typeof v !== "object" || Array.isArray(v)) throw new Error('the step must be an object: {"kind", "target", "args"}');
  const c = { target: v.target };
  if (v.kind !== undefined) c.kind = v.kind;
  if (v.args !== undefined) c.args = v.args;
  return c;
}

function DryRun({ agent, bundle }) {
  const [step, setStep] = useState(EXAMPLE);
  const [edited, setEdited] = useState(bundle || "");
  const [useEdited, setUseEdited] = useState(false);
  const [result, setResult] = useState(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => setEdited(bundle || ""), [bundle]);
  const [execId, setExecId] = useState("");
  const [replay, setReplay] = useState(null);
  async function test(body, done) {
    setBusy(true);
    setError(null);
    setResult(null);
    setReplay(null);
    try {
      if (useEdited) body.bundle = edited;
      done(await post(`/v0/policies/${encodeURIComponent(agent)}/test`, body));
    } catch (err) {
      setError(err.field ? `${err.field}: ${err.message}` : err.message);
    } finally {
      setBusy(false);
    }
  }
  function run(e) {
    e.preventDefault();
    let c;
    try {
      c = parseStep(step);
    } catch (err) {
      setError(err.message);
      return;
    }
    test({ cases: [c] }, (rep) => setResult(rep.results[0]));
  }
  function runReplay(e) {
    e.preventDefault();
    test({ execution_id: execId.trim() }, setReplay);
  }
  return html`<section class="panel" aria-labelledby="dry-h">
    <h2 id="dry-h">Dry run</h2>
    <form class="dryrun" onSubmit=${run}>
      <label for="dry-step">A step (JSON: <code>kind</code> tool_call, llm_call or local; <code>target</code>; <code>args</code>)</label>
      <textarea id="dry-step" rows="4" spellcheck="false" value=${step} onInput=${(e) => setStep(e.target.value)}></textarea>
      <label class="inline"><input type="checkbox" checked=${useEdited} onChange=${(e) => setUseEdited(e.target.checked)} /> against an edited policy (not saved)</label>
      ${useEdited && html`<label for="dry-bundle">Policy YAML</label>
        <textarea id="dry-bundle" rows="10" spellcheck="false" value=${edited} onInput=${(e) => setEdited(e.target.value)}></textarea>`}
      <p><button type="submit" disabled=${busy}>Test the step</button></p>
    </form>
    <form class="dryrun" onSubmit=${runReplay} aria-label="Replay an execution">
      <label for="dry-exec">Or replay an execution's recorded steps (its id): each expects the decision it got</label>
      <div class="row"><input id="dry-exec" class="mono grow" value=${execId} onInput=${(e) => setExecId(e.target.value)} required />
        <button type="submit" disabled=${busy}>Replay</button></div>
    </form>
    ${error && html`<p role="alert" class="error">The dry run failed: ${error}</p>`}
    <div aria-live="polite">${replay && html`<p class="summary">${replay.results.length} steps, ${replay.failed} decided differently now${replay.unexercised_rules ? `; rules no step reached: ${replay.unexercised_rules.join(", ")}` : ""}</p>
      <table class="list replay"><thead><tr><th scope="col">Step</th><th scope="col">Then</th><th scope="col">Now</th><th scope="col">Rule now</th><th scope="col">Same?</th></tr></thead>
      <tbody>${replay.results.map((r) => html`<tr data-pass=${String(r.pass)}>
        <td>${r.kind} <strong>${r.target}</strong></td><td>${r.expect || "-"}${r.was_rule ? ` (${r.was_rule})` : ""}</td>
        <td>${r.decision}</td><td class="mono">${r.rule_id || "-"}</td>
        <td>${r.pass ? "yes" : html`<strong class="cov bad">no${r.failure ? `: ${r.failure}` : ""}</strong>`}</td></tr>`)}</tbody></table>`}</div>
    <div aria-live="polite">${result && html`<dl class="fields verdict" data-decision=${result.decision}>
      <div class="field"><dt>Decision</dt><dd><strong class=${`status st-${result.decision === "allow" ? "allowed" : result.decision === "deny" ? "denied" : "awaiting_approval"}`}>${result.decision}</strong></dd></div>
      <div class="field"><dt>Rule</dt><dd class="mono">${result.rule_id || "-"}${result.rule ? ` (position ${result.rule.position}${result.rule.priority !== undefined ? `, priority ${result.rule.priority}` : ""})` : ""}</dd></div>
      ${result.reason && html`<div class="field"><dt>Reason</dt><dd>${result.reason}</dd></div>`}
      <div class="field"><dt>Step</dt><dd>${result.kind} <strong>${result.target}</strong></dd></div>
    </dl>`}</div>
  </section>`;
}

export function Policy({ agent }) {
  const [pol, setPol] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    get(`/v0/policies/${encodeURIComponent(agent)}`).then(setPol, setError);
  }, [agent]);
  return html`<article>
    <p><a href="#/policies">← Policies</a></p>
    <h1>Policy of <span class="mono">${agent}</span></h1>
    ${error && html`<p role="alert" class="error">Cannot read the policy: ${error.message}</p>`}
    ${pol && html`
      <p>${pol.has_policy ? html`Default action: <strong>${pol.default_action}</strong>; ${pol.rules.length} rules, in the order they are evaluated:`
        : html`This agent has no policy: every step is allowed.`}</p>
      ${pol.rules && pol.rules.length > 0 && html`<table class="list rules">
        <thead><tr><th scope="col">#</th><th scope="col">Rule</th><th scope="col">Decision</th><th scope="col">Priority</th></tr></thead>
        <tbody>${pol.rules.map((r) => html`<tr data-rule=${r.id}><td>${r.position}</td><td class="mono">${r.id}</td><td>${r.decision}</td><td>${r.priority ?? ""}</td></tr>`)}</tbody>
      </table>`}
      ${pol.bundle && html`<details><summary>The policy YAML</summary><pre class="json" aria-label="policy YAML">${pol.bundle}</pre></details>`}
      <${DryRun} agent=${agent} bundle=${pol.bundle} />`}
  </article>`;
}
