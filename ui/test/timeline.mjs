// timeline.mjs - drive a long execution's timeline in headless Chromium: the first screen
// reads one page of events, the next pages come as the reader reaches the end (a keyboard
// press on the "load more" button once, scrolling for the rest) until the last event, a
// step whose events straddle a page boundary is one entry, and live events keep coming:
// one committed while pages are still unread waits for them, one committed after they are
// all read is appended at once. tests/integration/test_dashboard.py sets it up and asserts.
// Usage: node timeline.mjs <spec.json>; spec: {url, token, shots, id, headers (the
// worker's dispatch headers), page}. Prints one JSON object of what it saw.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import puppeteer from "puppeteer-core";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = { shots: [], pages_read: [] };
const errors = [];
const T = 30000;
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
// the worker's side, through the API: a step proposed (3 events), a step completed, the end
const api = async (path, body) => {
  const r = await fetch(`${spec.url}${path}`, { method: "POST", body: JSON.stringify(body),
    headers: { Authorization: `Bearer ${spec.token}`, "Content-Type": "application/json", ...spec.headers } });
  const text = await r.text();
  if (!r.ok) throw new Error(`${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
};
let page;
try {
  page = await browser.newPage();
  await page.setViewport({ width: 1366, height: 800 });
  page.on("pageerror", (e) => errors.push(String(e)));
  // net::ERR_NETWORK_CHANGED: Chromium drops requests in flight when the host's interfaces
  // change, as other tests' sandboxes add and remove veths; the host's doing, not the page's
  page.on("console", (m) => m.type() === "error" && !m.text().includes("net::ERR_NETWORK_CHANGED") && errors.push(m.text()));
  page.on("request", (r) => {
    const u = new URL(r.url());
    if (u.pathname.endsWith(`/executions/${spec.id}/events`)) out.pages_read.push([Number(u.searchParams.get("after_seq")), Number(u.searchParams.get("limit"))]);
  });
  const shot = async (name) => {
    const p = join(spec.shots, `${name}.png`);
    await page.screenshot({ path: p });
    out.shots.push(p);
  };
  // what the timeline holds: its entries, every event in them (a step's as first..last and a count)
  const seen = () => page.evaluate(() => {
    const steps = [...document.querySelectorAll(".timeline > li[data-step]")].map((e) => ({
      id: e.dataset.step, first: +e.dataset.first, last: +e.dataset.last, events: +e.dataset.events }));
    const evs = [...document.querySelectorAll(".timeline > li[data-seq]")].map((e) => +e.dataset.seq);
    return { steps, evs, entries: document.querySelectorAll(".timeline > li").length,
      events: steps.reduce((n, s) => n + s.events, 0) + evs.length,
      max: Math.max(0, ...evs, ...steps.map((s) => s.last)),
      heading: document.querySelector("#tl-h")?.textContent, more: document.querySelector("button.more")?.textContent || null };
  });
  const shownCount = () => page.evaluate(() => document.querySelectorAll(".timeline > li").length);

  await page.goto(`${spec.url}/ui/`);
  await page.waitForSelector("#key", { timeout: T });
  await page.type("#key", spec.token);
  await page.keyboard.press("Enter");
  await page.waitForSelector("table.list", { timeout: T });
  await page.goto(`${spec.url}/ui/#/executions/${spec.id}`);
  await page.waitForSelector(".timeline > li", { timeout: T });
  await page.waitForSelector("button.more", { timeout: T });
  await page.waitForSelector(".exhead .live", { timeout: T }); // following the stream
  out.first = await seen();
  out.first.pages_read = out.pages_read.slice();
  await shot("execution-long-first-screen");

  // a live event while pages are unread: a step proposed now (3 events past the log's end)
  out.live_step = (await api(`/v0/executions/${spec.id}/steps`, { kind: "tool_call", target: "live_tool", args: { n: 1 } })).step_id;
  await page.waitForFunction((n) => document.querySelector(".more-wrap .help")?.textContent.includes(`of ${n} events`),
    { timeout: T }, spec.last_seq + 3);
  out.while_unread = await seen();

  // the next page by keyboard: focus the button, Enter
  const before = await shownCount();
  await page.focus("button.more");
  await page.keyboard.press("Enter");
  await page.waitForFunction((n) => document.querySelectorAll(".timeline > li").length > n, { timeout: T }, before);
  out.after_keyboard = await seen();
  // focus went to the first new entry, where a keyboard reader goes on
  await page.waitForFunction(() => document.activeElement?.tagName === "SUMMARY", { timeout: T });
  out.after_keyboard.focus = await page.evaluate(() => {
    const li = document.activeElement.closest(".timeline > li");
    return { index: [...li.parentNode.children].indexOf(li), first: +(li.dataset.first || li.dataset.seq) };
  });
  out.after_keyboard.entries_before = before;
  out.after_keyboard.pages_read = out.pages_read.slice();
  // then scroll to the end until there is nothing more to read
  for (let i = 0; i < 20 && (await page.$("button.more")); i++) {
    const n = await shownCount();
    await page.evaluate(() => window.scrollTo(0, document.documentElement.scrollHeight));
    await page.waitForFunction((k) => document.querySelectorAll(".timeline > li").length > k || !document.querySelector("button.more"),
      { timeout: T }, n);
  }
  out.all = await seen();
  out.all.pages_read = out.pages_read.slice();
  // the straddling step, opened: its own events, both sides of the boundary
  await page.$eval(`li[data-step="${spec.straddle}"]`, (e) => e.scrollIntoView({ block: "center" }));
  await page.click(`li[data-step="${spec.straddle}"] summary`);
  await page.waitForSelector(`li[data-step="${spec.straddle}"] .sub li`, { timeout: T });
  out.straddle_sub = await page.$$eval(`li[data-step="${spec.straddle}"] .sub li`, (els) => els.map((e) => e.textContent.trim().split(/\s+/).slice(0, 2)));
  await shot("execution-long-page-boundary");

  // live after every page is read: the step completes, the execution ends, appended at once
  await api(`/v0/executions/${spec.id}/steps/${out.live_step}/complete`, { result: { ok: true } });
  await api(`/v0/executions/${spec.id}/complete`, { output: { done: true } });
  await page.waitForSelector(".exhead .st-completed", { timeout: T });
  await page.waitForFunction(() => /\(\d+ events, \d+ steps\)/.test(document.querySelector("#tl-h").textContent), { timeout: T });
  out.end = await seen();
  out.end.pages_read = out.pages_read.slice();
  out.errors = errors;
} catch (e) {
  out.error = String((e && e.stack) || e);
  out.errors = errors;
  out.page = page ? await page.evaluate(() => document.querySelector("main")?.innerText.slice(0, 2000)).catch(() => "") : "";
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
