// dashboard.mjs - drive the dashboard in Debian's headless Chromium (puppeteer-core, no
// browser download) through the scenarios tests/integration/test_dashboard.py sets up.
// Usage: node dashboard.mjs <spec.json>; spec: {url, token, shots, hello_id, blocked_id,
// session}. Prints one JSON object of what it saw; the Python test asserts on it.
// Between steps it waits for what the page shows, never for a fixed time.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import puppeteer from "puppeteer-core";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = { shots: [] };
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
const T = 20000;
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1366, height: 800 });
  const consoleErrors = [];
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  // net::ERR_NETWORK_CHANGED: Chromium drops requests in flight when the host's interfaces
  // change, as other tests' sandboxes add and remove veths; the host's doing, not the page's
  page.on("console", (m) => m.type() === "error" && !m.text().includes("net::ERR_NETWORK_CHANGED") && consoleErrors.push(m.text()));
  const shot = async (name) => {
    const p = join(spec.shots, `${name}.png`);
    await page.screenshot({ path: p, fullPage: false });
    out.shots.push(p);
  };
  // every form control has a label (or aria-label) and every button a name: what a screen
  // reader announces; returns the ones that have none
  out.unlabelled = {};
  const unlabelled = async (view) => {
    out.unlabelled[view] = await page.$$eval("input, select, textarea, button", (els) => els
      .filter((e) => e.type !== "hidden" && !(e.labels && e.labels.length) && !e.getAttribute("aria-label") &&
        !(e.tagName === "BUTTON" && e.textContent.trim()))
      .map((e) => e.outerHTML.slice(0, 120)));
  };
  const texts = (sel) => page.$$eval(sel, (els) => els.map((e) => e.textContent.trim()));
  const rowsSettled = async (pred) => {
    await page.waitForFunction(pred, { timeout: T });
  };

  // 1. a wrong key is refused with a clear message
  const res = await page.goto(`${spec.url}/ui/`, { waitUntil: "load" });
  out.index_headers = res.headers();
  await page.waitForSelector("#key", { timeout: T });
  await page.type("#key", "not-the-token");
  await page.keyboard.press("Enter");
  await page.waitForSelector("#signin-error", { timeout: T });
  out.wrong_key_error = await page.$eval("#signin-error", (e) => e.textContent.trim());
  await shot("signin-wrong-key");
  await unlabelled("signin");

  // 2. the right token: the list
  await page.$eval("#key", (e) => (e.value = ""));
  await page.type("#key", spec.token);
  await page.keyboard.press("Enter");
  await page.waitForSelector("table.list tbody tr[data-id]", { timeout: T });
  out.list_ids = await page.$$eval("tbody tr[data-id]", (r) => r.map((x) => x.dataset.id));
  await page.waitForSelector(".count[data-status=all]", { timeout: T });
  await page.waitForSelector(".summary .live", { timeout: T }); // the list stream is open
  const counts = () => page.$$eval(".count[data-status]", (els) => Object.fromEntries(els.map((e) => [e.dataset.status, e.textContent])));
  out.counts = await counts();
  await shot("executions");
  await unlabelled("executions");

  // 2b. live: an execution created now appears, and turns completed, without a reload
  await page.evaluate(() => (window.__noReload = true));
  const liveId = await page.evaluate(async (t) => {
    const r = await fetch("/v0/executions", { method: "POST", headers: { Authorization: `Bearer ${t}`, "Content-Type": "application/json" },
      body: JSON.stringify({ agent_id: "hello", input: { name: "live" } }) });
    return (await r.json()).id;
  }, spec.token);
  await page.waitForSelector(`tbody tr[data-id="${liveId}"]`, { timeout: T });
  await page.waitForSelector(`tbody tr[data-id="${liveId}"] .st-completed`, { timeout: T });
  await page.waitForFunction((n) => document.querySelector(".count[data-status=completed]").textContent === String(n),
    { timeout: T }, Number(out.counts.completed) + 1);
  out.live = { id: liveId, first_row: await page.$eval("tbody tr[data-id]", (r) => r.dataset.id),
    no_reload: await page.evaluate(() => window.__noReload === true), counts: await counts() };

  // 2c. the time filter (in the address, as the inputs set it): created at or after a time
  await page.goto(`${spec.url}/ui/#/executions?created_after=${encodeURIComponent(spec.created_after)}`);
  await page.waitForFunction((n) => document.querySelector(".count[data-status=all]")?.textContent === String(n) &&
    document.querySelectorAll("tbody tr[data-id]").length === n, { timeout: T }, spec.after_count);
  out.filter_time = { ids: await page.$$eval("tbody tr[data-id]", (r) => r.map((x) => x.dataset.id)),
    input: await page.$eval('input[name="created_after"]', (e) => e.value), counts: await counts() };
  await page.goto(`${spec.url}/ui/#/executions`);
  await page.waitForSelector("table.list tbody tr[data-id]", { timeout: T });

  // 3. filters: status, agent, session (each one alone)
  await page.click('input[name="status"][value="completed"]');
  await rowsSettled(() => location.hash.includes("status=completed") &&
    [...document.querySelectorAll("tbody tr[data-id] .status")].every((s) => s.textContent === "completed") &&
    document.querySelectorAll("tbody tr[data-id]").length > 0);
  out.filter_status = await texts("tbody tr[data-id] td:nth-child(3)");
  await shot("executions-filter-completed");
  await page.click('input[name="status"][value=""]');
  await page.select('select[name="agent_id"]', "shell");
  await rowsSettled(() => location.hash.includes("agent_id=shell") && !location.hash.includes("status=") &&
    [...document.querySelectorAll("tbody tr[data-id] td:nth-child(2)")].every((s) => s.textContent === "shell"));
  out.filter_agent = await texts("tbody tr[data-id] td:nth-child(2)");
  await page.select('select[name="agent_id"]', "");
  await page.type('input[name="session"]', spec.session);
  await page.keyboard.press("Enter");
  await rowsSettled(() => location.hash.includes("session=") && !location.hash.includes("agent_id") &&
    document.querySelectorAll("tbody tr[data-id]").length > 0 &&
    [...document.querySelectorAll("tbody tr[data-id] td:nth-child(4)")].every((s) => s.textContent !== ""));
  out.filter_session = await page.$$eval("tbody tr[data-id]", (r) => r.map((x) => [x.dataset.id, x.children[3].textContent]));

  // 4. the execution view of the real hello run
  await page.goto(`${spec.url}/ui/#/executions/${spec.hello_id}`);
  await page.waitForSelector(".timeline .item", { timeout: T });
  await page.waitForSelector(".outcome", { timeout: T });
  await page.click(".timeline .step summary"); // a step's details are built when opened
  await page.waitForSelector(".timeline .step .sub li", { timeout: T });
  out.hello = {
    status: await page.$eval(".exhead .status", (e) => e.textContent),
    agent: await page.$eval(".exhead .fields .field dd", (e) => e.textContent),
    steps: await texts(".timeline .step .target"),
    step_states: await texts(".timeline .step summary .status"),
    events: await texts(".timeline .item .seq"),
    output: await page.$eval(".outcome pre", (e) => e.textContent),
  };
  await shot("execution");

  // 5. approvals inbox, then approve on the blocked execution's page and watch it complete live
  await page.goto(`${spec.url}/ui/#/approvals`);
  await page.waitForSelector(`article.approval[data-execution="${spec.blocked_id}"]`, { timeout: T });
  out.inbox = await page.$$eval("article.approval", (els) => els.map((e) => ({
    execution: e.dataset.execution, title: e.querySelector("h3").textContent.replace(/\s+/g, " ").trim(),
    rule: e.querySelector("p").textContent.trim(), args: e.querySelector("pre").textContent })));
  out.nav_badge = await page.$eval(".top .badge", (e) => e.textContent);
  await shot("approvals");
  await page.goto(`${spec.url}/ui/#/executions/${spec.blocked_id}`);
  await page.waitForSelector(".exhead .status.st-blocked", { timeout: T });
  await page.waitForSelector(".live", { timeout: T });
  await page.waitForSelector("article.approval input[name=decided_by]", { timeout: T });
  out.blocked_seen = true;
  await page.type("article.approval input[name=decided_by]", "ui-tester");
  await page.type("article.approval input[name=rationale]", "fine in a temp dir");
  await shot("execution-blocked");
  await unlabelled("execution-blocked");
  await page.click("article.approval button.approve");
  // the page follows the event stream: no reload
  await page.waitForSelector(".exhead .status.st-completed", { timeout: 60000 });
  out.live_completed = await page.$eval(".exhead .status", (e) => e.textContent);
  out.live_outcome = await page.$eval(".outcome pre", (e) => e.textContent);
  out.live_steps = await page.$$eval(".timeline .step", (els) => els.map((e) => [
    e.querySelector(".target").textContent, e.querySelector("summary .status").textContent]));

  // 6. forks: the coverage shown before forking, then fork and open the fork
  out.forks = [];
  await page.goto(`${spec.url}/ui/#/executions/${spec.workspace_id}`);
  await page.waitForSelector(".timeline .item", { timeout: T });
  for (const seq of spec.fork_seqs) {
    // the fork form opens from the page's button, then takes the event number typed in
    if (!(await page.$("#fork-panel"))) await page.click("button.forkopen");
    await page.waitForSelector("#fork-panel input[name=at_seq]", { timeout: T });
    await page.click("#fork-panel input[name=at_seq]", { clickCount: 3 });
    await page.keyboard.type(String(seq));
    await page.waitForFunction((n) => {
      const h = document.querySelector("#fork-h");
      return h && h.textContent.includes(`#${n}`) && document.querySelector(".fork .cov");
    }, { timeout: T }, seq);
    out.forks.push(await page.$eval(".fork", (f) => ({
      heading: f.querySelector("#fork-h").textContent,
      covered: f.querySelector(".cov").dataset.covered ?? null,
      rows: [...f.querySelectorAll("tbody tr")].map((r) => ({ key: r.dataset.key,
        ref: r.querySelector(".ref").textContent, covered: r.querySelector(".covered").textContent })),
    })));
  }
  await shot("fork");
  await unlabelled("fork");
  await page.type(".fork input[name=session]", spec.fork_session);
  await page.click(".fork button[type=submit]");
  await page.waitForFunction((src) => location.hash.startsWith("#/executions/") && !location.hash.includes(src) &&
    document.querySelector(".exhead"), { timeout: T }, spec.workspace_id);
  out.fork_id = await page.evaluate(() => location.hash.split("/")[2]);
  await page.waitForSelector(".exhead a[href*='" + spec.workspace_id + "']", { timeout: T });
  out.fork_header = await page.$eval(".exhead .fields", (e) => e.textContent);
  // the fork tree: the original with its fork under it, this one marked
  await page.waitForSelector(".forktree .tree li li", { timeout: T });
  out.fork_tree = await page.$eval(".forktree .tree", (t) => ({
    root: t.querySelector(":scope > li > a, :scope > li > strong").getAttribute("href"),
    kids: [...t.querySelectorAll(":scope > li > ul > li > strong[aria-current]")].map((e) => e.textContent) }));
  await page.$eval(".forktree", (e) => e.scrollIntoView({ block: "center" }));
  await shot("fork-tree");

  // 7. the policy of the shell agent, and a dry run of a pasted step
  await page.goto(`${spec.url}/ui/#/policies`);
  await page.waitForSelector('tr[data-agent="shell"] a', { timeout: T });
  await page.click('tr[data-agent="shell"] a');
  await page.waitForSelector("table.rules tr[data-rule]", { timeout: T });
  out.policy_rules = await page.$$eval("table.rules tr[data-rule]", (r) => r.map((x) => x.dataset.rule));
  await page.$eval("#dry-step", (e) => (e.value = ""));
  await page.type("#dry-step", JSON.stringify({ kind: "tool_call", target: "shell", args: { command: "touch x" } }));
  await page.click(".dryrun button[type=submit]");
  await page.waitForSelector(".verdict", { timeout: T });
  out.dry_run = await page.$eval(".verdict", (v) => ({ decision: v.dataset.decision,
    text: v.textContent.replace(/\s+/g, " ").trim() }));
  await shot("policy");
  await unlabelled("policy");
  // replay the blocked shell run's recorded steps: each decided as it was
  await page.type("#dry-exec", spec.blocked_id);
  await page.click('form[aria-label="Replay an execution"] button[type=submit]');
  await page.waitForSelector("table.replay tbody tr", { timeout: T });
  out.replay = await page.$$eval("table.replay tbody tr", (rs) => rs.map((r) => [r.dataset.pass,
    ...[...r.children].map((c) => c.textContent.trim())]));
  // 8. the inbox is live: an approval asked while it is open appears; deny it there
  await page.goto(`${spec.url}/ui/#/approvals`);
  await page.waitForSelector(".summary", { timeout: T });
  const askId = await page.evaluate(async (t) => {
    const r = await fetch("/v0/executions", { method: "POST", headers: { Authorization: `Bearer ${t}`, "Content-Type": "application/json" },
      body: JSON.stringify({ agent_id: "shell", input: { commands: ["touch made-by-denial"] } }) });
    return (await r.json()).id;
  }, spec.token);
  out.ask_id = askId; // for the test's report if the card never comes
  await page.waitForSelector(`article.approval[data-execution="${askId}"] input[name=decided_by]`, { timeout: T });
  await page.$eval(`article.approval[data-execution="${askId}"] input[name=decided_by]`, (e) => (e.value = ""));
  await page.type(`article.approval[data-execution="${askId}"] input[name=decided_by]`, "ui-tester");
  await page.type(`article.approval[data-execution="${askId}"] input[name=rationale]`, "not from the inbox");
  await page.click(`article.approval[data-execution="${askId}"] button.deny`);
  // read in the same check that finds it: the inbox reads the pending list again after a
  // decision, and the decided card leaves it then
  const decided = await page.waitForFunction((id) => document.querySelector(`article.approval[data-execution="${id}"] .decided`)?.textContent,
    { timeout: T }, askId);
  out.inbox_live = { id: askId, decided: await decided.jsonValue() };
  out.console_errors = [...consoleErrors];

  // 9. a stored key that stops working (a restarted dev kernel has a new token) brings the
  // sign-in back with the kernel's reason
  // (set by the new document before the app runs: the old page's poll or list stream, seeing the
  // stale key first, would sign out and clear it before the reload, and then there is no reason)
  await page.evaluateOnNewDocument(() => {
    if (!sessionStorage.getItem("test.stale-set")) {
      sessionStorage.setItem("test.stale-set", "1");
      sessionStorage.setItem("rebuno.key", "stale-token");
    }
  });
  await page.reload();
  await page.waitForSelector("#signin-error", { timeout: T });
  out.stale_key_error = await page.$eval("#signin-error", (e) => e.textContent.trim());
  out.stale_key_cleared = await page.evaluate(() => sessionStorage.getItem("rebuno.key") === null);
} catch (e) {
  out.error = String(e && e.stack || e);
  out.page = await browser.pages().then((ps) => ps[ps.length - 1].evaluate(() => `${location.hash}\n${document.body.innerText}`.slice(0, 1500))).catch(() => "");
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
