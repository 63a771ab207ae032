// sandboxes.mjs - drive the sandbox views in headless Chromium: sign in, see the sandbox in
// the list, read a command's output, open a terminal (xterm.js over the PTY WebSocket) and
// type a command into it. Either in the dashboard `rebuno sandboxd` serves (spec.url, signed
// in with its token), or, with spec.kernel = {url, token}, in the kernel's dashboard under
// `rebuno dev`: signed in with the kernel's token, then the sandbox service's token asked
// by the Sandboxes view (a wrong one first), the page calling sandboxd's /v1 cross-origin;
// there it also takes a snapshot, makes a sandbox from it, forks that one, then pauses,
// resumes (by keyboard), stops and deletes the fork (the confirmation dialog by keyboard:
// Escape first, then Tab and Enter), checking each state through /v1 itself, and shows the
// error of an action on a sandbox deleted behind the page's back.
// Usage: node sandboxes.mjs <spec.json>; spec: {url, token, shots, name, command_text, kernel?}.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import puppeteer from "puppeteer-core";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = { shots: [] };
const errors = [];
let page;
const T = 30000;
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
try {
  page = await browser.newPage();
  await page.setViewport({ width: 1366, height: 800 });
  page.on("pageerror", (e) => errors.push(String(e)));
  // net::ERR_NETWORK_CHANGED: Chromium drops requests in flight when the host's interfaces
  // change, as other tests' sandboxes add and remove veths; the host's doing, not the page's
  page.on("console", (m) => m.type() === "error" && !m.text().includes("net::ERR_NETWORK_CHANGED") && errors.push(m.text()));
  const shot = async (name) => {
    const p = join(spec.shots, `${name}.png`);
    await page.screenshot({ path: p });
    out.shots.push(p);
  };
  if (spec.kernel) {
    await page.goto(`${spec.kernel.url}/ui/`);
    await page.waitForSelector("#key", { timeout: T });
    await page.type("#key", spec.kernel.token);
    await page.keyboard.press("Enter");
    await page.waitForSelector('.top a[href="#/sandboxes"]', { timeout: T });
    await page.click('.top a[href="#/sandboxes"]');
    await page.waitForSelector("#sbkey", { timeout: T });
    await page.type("#sbkey", "wrong-token");
    await page.keyboard.press("Enter");
    await page.waitForSelector("#sbkey-error", { timeout: T });
    out.wrong_token_error = await page.$eval("#sbkey-error", (e) => e.textContent.trim());
    await page.$eval("#sbkey", (e) => (e.value = ""));
    await page.type("#sbkey", spec.token);
    await page.keyboard.press("Enter");
    out.page_origin = await page.evaluate(() => location.origin);
  } else {
    await page.goto(`${spec.url}/ui/`);
    await page.waitForSelector("#key", { timeout: T });
    await page.type("#key", spec.token);
    await page.keyboard.press("Enter");
  }
  await page.waitForSelector(`tr[data-name="${spec.name}"]`, { timeout: T });
  out.row = await page.$eval(`tr[data-name="${spec.name}"]`, (r) => [...r.children].map((c) => c.textContent.trim()));
  await shot(spec.kernel ? "kernel-sandboxes" : "sandboxes");
  await page.click(`tr[data-name="${spec.name}"] a`);
  await page.waitForSelector("li[data-cmd] button", { timeout: T });
  out.commands = await page.$$eval("li[data-cmd] code", (els) => els.map((e) => e.textContent));
  await page.click("li[data-cmd] button");
  await page.waitForSelector("pre.stdout", { timeout: T });
  out.stdout = await page.$eval("pre.stdout", (e) => e.textContent);
  await page.click("#term-h ~ button");
  await page.waitForSelector('#term-state[data-state="open"]', { timeout: T });
  await page.waitForFunction(() => /[#$] $/.test(document.querySelector(".xterm-rows")?.textContent.trimEnd() + " "), { timeout: T });
  await page.keyboard.type(spec.command_text);
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelector(".xterm-rows").textContent.includes("typed-42"), { timeout: T });
  out.terminal = await page.$eval(".xterm-rows", (e) => [...e.children].map((r) => r.textContent).join("\n"));
  await shot(spec.kernel ? "kernel-sandbox-terminal" : "sandbox-terminal");
  if (spec.kernel) {
    // actions: a snapshot, a new sandbox from it (the page opens it), a fork of that one
    await page.click("button[name=snapshot]");
    await page.waitForSelector("li[data-snapshot] button[name=restore]", { timeout: T });
    out.snapshot = await page.$eval("li[data-snapshot]", (e) => e.dataset.snapshot);
    await page.click("li[data-snapshot] button[name=restore]");
    await page.waitForFunction((n) => location.hash.startsWith("#/sandboxes/") && !location.hash.endsWith(`/${n}`) &&
      document.querySelector(".exhead h1"), { timeout: T }, spec.name);
    out.restored = decodeURIComponent(await page.evaluate(() => location.hash.split("/")[2]));
    await page.waitForSelector("button[name=fork]", { timeout: T });
    await page.click("button[name=fork]");
    await page.waitForFunction((n) => location.hash.startsWith("#/sandboxes/") && !location.hash.endsWith(`/${n}`) &&
      document.querySelector(".exhead h1")?.textContent.includes(decodeURIComponent(location.hash.split("/")[2])),
      { timeout: T }, out.restored);
    out.forked = decodeURIComponent(await page.evaluate(() => location.hash.split("/")[2]));

    // lifecycle of the fork: each state as the page shows it and as /v1 has it then
    const v1 = async (method, path) => {
      const r = await fetch(spec.url + path, { method, headers: { Authorization: `Bearer ${spec.token}`, "Content-Type": "application/json" },
        body: method === "POST" ? "{}" : undefined });
      const text = await r.text();
      return { status: r.status, body: text ? JSON.parse(text) : null };
    };
    const shown = () => page.$eval(".exhead .field .status", (e) => e.textContent);
    const stateIs = (s) => page.waitForFunction((st) => document.querySelector(".exhead .field .status")?.textContent === st, { timeout: T }, s);
    const focused = () => page.evaluate(() => document.activeElement?.getAttribute("name"));
    const f = `/v1/sandboxes/${encodeURIComponent(out.forked)}`;
    out.lifecycle = { before: [await shown(), (await v1("GET", f)).body.state] };
    await page.click(".lifecycle button[name=pause]");
    await stateIs("paused");
    out.lifecycle.paused = [await shown(), (await v1("GET", f)).body.state];
    out.lifecycle.focus_after_pause = await focused();
    await page.keyboard.press("Enter"); // Resume, the button focus moved to
    await stateIs("running");
    out.lifecycle.resumed = [await shown(), (await v1("GET", f)).body.state];
    await page.click(".lifecycle button[name=stop]");
    await stateIs("stopped");
    out.lifecycle.stopped = [await shown(), (await v1("GET", f)).body.state];
    out.lifecycle.disabled_when_stopped = await page.$$eval(".lifecycle button[disabled]", (els) => els.map((e) => e.name));
    // delete: a modal dialog, focus on Cancel; Escape keeps the sandbox
    await page.focus(".lifecycle button[name=delete]");
    await page.keyboard.press("Enter");
    await page.waitForSelector("dialog.confirm[open]", { timeout: T });
    out.lifecycle.dialog = await page.$eval("dialog.confirm[open]", (d) => ({
      title: document.getElementById(d.getAttribute("aria-labelledby")).textContent,
      text: document.getElementById(d.getAttribute("aria-describedby")).textContent, modal: d.matches(":modal") }));
    out.lifecycle.focus_in_dialog = await focused();
    await page.keyboard.press("Escape");
    await page.waitForSelector("dialog.confirm:not([open])", { timeout: T });
    out.lifecycle.after_escape = (await v1("GET", f)).status;
    out.lifecycle.focus_after_escape = await focused();
    await page.keyboard.press("Enter"); // the Delete… button again
    await page.waitForSelector("dialog.confirm[open]", { timeout: T });
    await page.keyboard.press("Tab");
    out.lifecycle.focus_after_tab = await focused();
    await shot("kernel-sandbox-delete");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => location.hash === "#/sandboxes", { timeout: T });
    await page.waitForSelector(`tr[data-name="${spec.name}"]`, { timeout: T });
    out.lifecycle.listed_after_delete = await page.$$eval("tr[data-name]", (r) => r.map((x) => x.dataset.name));
    out.lifecycle.after_delete = (await v1("GET", f)).status;
    // from the list: stop the restored sandbox in its row (its buttons named for it)
    const row = `tr[data-name="${out.restored}"]`;
    out.lifecycle.row_stop_name = await page.$eval(`${row} button[name=stop]`, (b) => b.getAttribute("aria-label"));
    await page.click(`${row} button[name=stop]`);
    await page.waitForFunction((r) => document.querySelector(`${r} .status`)?.textContent === "stopped", { timeout: T }, row);
    out.lifecycle.row_stopped = (await v1("GET", `/v1/sandboxes/${encodeURIComponent(out.restored)}`)).body.state;
    out.errors_before_gone = errors.slice();

    // an action on a sandbox deleted behind the page's back: the page says why
    const gone = await fetch(`${spec.url}/v1/sandboxes`, { method: "POST", headers: { Authorization: `Bearer ${spec.token}`,
      "Content-Type": "application/json" }, body: JSON.stringify({ name: "kui-gone" }) });
    if (gone.status !== 201) throw new Error(`create kui-gone: ${gone.status} ${await gone.text()}`);
    await page.goto(`${spec.kernel.url}/ui/#/sandboxes/kui-gone`);
    await page.waitForSelector(".lifecycle button[name=pause]:not([disabled])", { timeout: T });
    if ((await v1("DELETE", "/v1/sandboxes/kui-gone")).status !== 204) throw new Error("delete kui-gone");
    await page.click(".lifecycle button[name=pause]");
    await page.waitForSelector(".lifecycle [role=alert]", { timeout: T });
    out.gone_error = await page.$eval(".lifecycle [role=alert]", (e) => e.textContent.trim());
    await shot("kernel-sandbox-action-error");
  }
  out.errors = errors;
} catch (e) {
  out.error = String((e && e.stack) || e);
  out.errors = errors;
  out.page_alerts = page ? await page.$$eval("[role=alert], #term-state", (els) => els.map((x) => x.textContent)).catch(() => []) : [];
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
