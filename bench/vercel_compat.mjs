// bench/vercel_compat.mjs - create -> first output, and a command's round trip, through the
// official @vercel/sandbox SDK against sandboxd's Vercel-compatible endpoint. Run by
// bench/vercel_compat.sh (which starts the daemon); prints one JSON line of samples (ms).
//   node bench/vercel_compat.mjs ROUNDS CMDS
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const compat = path.join(here, "..", "tests", "compat", "vercel");
const { Sandbox } = await import(pathToFileURL(path.join(compat, "node_modules", "@vercel", "sandbox", "dist", "index.js")));
const { rebuno } = await import(pathToFileURL(path.join(compat, "rebuno-vercel.mjs")));

const rounds = Number(process.argv[2] || 5), cmds = Number(process.argv[3] || 20);
const o = rebuno();
const create = [], rtt = [], cpu = []; // cpu: the client process's own CPU ms per command
// sandboxd's own CPU (ms) per create -> first output and per command, from
// REBUNO_BENCH_SANDBOXD (its pid): see serverCpu() in vercel_compat_v1.py
const srvCreate = [], srvCmd = [];
const srvPid = process.env.REBUNO_BENCH_SANDBOXD;
// ns of CPU so far of sandboxd's threads and its direct children's (helpers and the
// zygote; not the sandboxes, which are the zygote's children), from schedstat
function serverCpu() {
  if (!srvPid) return 0;
  let ns = 0;
  const proc = (p, kids) => {
    let tasks = [];
    try {
      tasks = fs.readdirSync(`/proc/${p}/task`);
    } catch {
      return;
    }
    for (const t of tasks) {
      try {
        ns += Number(fs.readFileSync(`/proc/${p}/task/${t}/schedstat`, "utf8").split(" ")[0]);
        if (kids)
          for (const c of fs.readFileSync(`/proc/${p}/task/${t}/children`, "utf8").split(" "))
            if (c.trim()) proc(c.trim(), false);
      } catch {}
    }
  };
  proc(srvPid, true);
  return ns / 1e6;
}
// One unmeasured sandbox first: a fresh Node process runs the SDK's code (its zod
// validators, NDJSON parser, undici) interpreted until V8 has compiled it, which took the
// first ~100 commands of each process 1.3-1.6x longer than later ones here. An agent is a
// long-lived process, so both clients are measured warm (vercel_compat_v1.py does the same).
{
  const sb = await Sandbox.create({ ...o, timeout: 120000 });
  for (let k = 0; k < 100; k++) await sb.runCommand("true", []);
  await sb.delete();
}
for (let i = 0; i < rounds; i++) {
  const s0 = serverCpu(), t0 = performance.now();
  const sb = await Sandbox.create({ ...o, timeout: 120000 });
  const r = await sb.runCommand("echo", ["hi"]);
  if ((await r.stdout()) !== "hi\n") throw new Error("unexpected output");
  create.push(performance.now() - t0);
  srvCreate.push(serverCpu() - s0);
  const c0 = process.cpuUsage(), s1 = serverCpu();
  for (let k = 0; k < cmds; k++) {
    const t = performance.now();
    await sb.runCommand("true", []);
    rtt.push(performance.now() - t);
  }
  const c = process.cpuUsage(c0);
  cpu.push((c.user + c.system) / 1000 / cmds);
  srvCmd.push((serverCpu() - s1) / cmds);
  await sb.delete();
}
// the same wire without the SDK's client work (its validation and stream parsing): one
// fetch per command, the body read whole
const raw = [];
let srvRaw, srvRawV1; // sandboxd CPU ms per plain-fetch command
{
  const sb = await Sandbox.create({ ...o, timeout: 120000 });
  const url = `https://vercel.com/api/v2/sandboxes/sessions/${sb.currentSession().sessionId}/cmd?teamId=t`;
  const headers = { authorization: `Bearer ${o.token}`, "content-type": "application/json" };
  const body = JSON.stringify({ command: "true", args: [], env: {}, sudo: false, wait: true, logs: true });
  const s0 = serverCpu();
  for (let k = 0; k < rounds * cmds; k++) {
    const t = performance.now();
    const r = await o.fetch(url, { method: "POST", headers, body });
    await r.text();
    raw.push(performance.now() - t);
  }
  srvRaw = (serverCpu() - s0) / (rounds * cmds);
  await sb.delete();
}
// and /v1 with the same plain fetch: what is the endpoint's, what is the client's
const rawV1 = [];
if (process.env.REBUNO_SANDBOX_URL) {
  const v1 = process.env.REBUNO_SANDBOX_URL.replace(/\/+$/, "") + "/v1";
  const headers = { authorization: `Bearer ${o.token}`, "content-type": "application/json" };
  const sb = await (await fetch(`${v1}/sandboxes`, { method: "POST", headers, body: "{}" })).json();
  const body = JSON.stringify({ cmd: "true", args: [], wait: true });
  const s0 = serverCpu();
  for (let k = 0; k < rounds * cmds; k++) {
    const t = performance.now();
    const r = await fetch(`${v1}/sandboxes/${sb.id}/commands`, { method: "POST", headers, body });
    await r.text();
    rawV1.push(performance.now() - t);
  }
  srvRawV1 = (serverCpu() - s0) / (rounds * cmds);
  await fetch(`${v1}/sandboxes/${sb.id}`, { method: "DELETE", headers });
}
console.log(JSON.stringify({ client: "@vercel/sandbox 3.5.0", create, rtt, cpu, raw, rawV1, srvCreate,
                             srvCmd, srvRaw: [srvRaw], srvRawV1: srvRawV1 === undefined ? [] : [srvRawV1] }));
