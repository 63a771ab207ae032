// measure.mjs - time to first render and bytes transferred of dashboard pages in headless
// Chromium (cold cache each time). Usage: node measure.mjs <spec.json>; spec: {url, token,
// pages: [{name, hash, ready, scroll?, identity?}]} where ready is a JS expression true once
// the page shows its data; scroll: a JS expression, and once ready the page is scrolled to its
// end at every frame (as a reader holding End would) until it is true; identity: ask for
// uncompressed replies (Accept-Encoding: identity), to compare. Prints one JSON line per page:
// {name, ms, bytes, requests, dom_nodes}, bytes and requests being those finished when the
// data was on screen.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(new URL("../../ui/package.json", import.meta.url));
const puppeteer = require("puppeteer-core");
const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
try {
  for (const p of spec.pages) {
    for (let run = 0; run < (spec.runs || 3); run++) {
      const ctx = await browser.createBrowserContext();
      const page = await ctx.newPage();
      await page.setViewport({ width: 1366, height: 800 });
      const cdp = await page.createCDPSession();
      await cdp.send("Network.enable");
      await cdp.send("Network.setCacheDisabled", { cacheDisabled: true });
      if (p.identity) await cdp.send("Network.setExtraHTTPHeaders", { headers: { "Accept-Encoding": "identity" } });
      let bytes = 0;
      let requests = 0;
      cdp.on("Network.loadingFinished", (e) => ((bytes += e.encodedDataLength), requests++));
      // the key is in session storage already, as after a sign-in
      await page.evaluateOnNewDocument((t) => sessionStorage.setItem("rebuno.key", t), spec.token);
      const t0 = Date.now();
      await page.goto(`${spec.url}/ui/${p.hash}`, { waitUntil: "domcontentloaded" });
      try {
        await page.waitForFunction(p.ready, { timeout: 60000, polling: "raf" });
        if (p.scroll)
          await page.waitForFunction(`(window.scrollTo(0, document.documentElement.scrollHeight), ${p.scroll})`,
            { timeout: 60000, polling: "raf" });
      } catch (e) {
        const seen = await page.evaluate(() => document.body.innerText.slice(0, 400)).catch(() => "");
        console.log(JSON.stringify({ name: p.name, run, error: String(e.message), seen }));
        await ctx.close();
        continue;
      }
      const ms = Date.now() - t0;
      const bytesAtRender = bytes; // what had arrived by the time the data was on screen
      const requestsAtRender = requests;
      const domNodes = await page.evaluate(() => document.getElementsByTagName("*").length);
      console.log(JSON.stringify({ name: p.name, run, ms, bytes: bytesAtRender, requests: requestsAtRender, dom_nodes: domNodes }));
      await ctx.close();
    }
  }
} finally {
  await browser.close();
}
