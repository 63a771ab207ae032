// sandboxes.mjs - drive the dashboard served by `rebuno sandboxd` in headless Chromium:
// sign in with the daemon's token, see the sandbox in the list, read a command's output,
// open a terminal (xterm.js over the PTY WebSocket) and type a command into it.
// Usage: node sandboxes.mjs <spec.json>; spec: {url, token, shots, name, command_text}.
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
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  const shot = async (name) => {
    const p = join(spec.shots, `${name}.png`);
    await page.screenshot({ path: p });
    out.shots.push(p);
  };
  await page.goto(`${spec.url}/ui/`);
  await page.waitForSelector("#key", { timeout: T });
  await page.type("#key", spec.token);
  await page.keyboard.press("Enter");
  await page.waitForSelector(`tr[data-name="${spec.name}"]`, { timeout: T });
  out.row = await page.$eval(`tr[data-name="${spec.name}"]`, (r) => [...r.children].map((c) => c.textContent.trim()));
  await shot("sandboxes");
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
  await shot("sandbox-terminal");
  out.errors = errors;
} catch (e) {
  out.error = String((e && e.stack) || e);
  out.errors = errors;
  out.page_alerts = page ? await page.$$eval("[role=alert], #term-state", (els) => els.map((x) => x.textContent)).catch(() => []) : [];
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
