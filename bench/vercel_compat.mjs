// bench/vercel_compat.mjs - create -> first output, and a command's round trip, through the
// official @vercel/sandbox SDK against sandboxd's Vercel-compatible endpoint. Run by
// bench/vercel_compat.sh (which starts the daemon); prints one JSON line of samples (ms).
//   node bench/vercel_compat.mjs ROUNDS CMDS
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const compat = path.join(here, "..", "tests", "compat", "vercel");
const { Sandbox } = await import(pathToFileURL(path.join(compat, "node_modules", "@vercel", "sandbox", "dist", "index.js")));
const { rebuno } = await import(pathToFileURL(path.join(compat, "rebuno-vercel.mjs")));

const rounds = Number(process.argv[2] || 5), cmds = Number(process.argv[3] || 20);
const o = rebuno();
const create = [], rtt = [];
for (let i = 0; i < rounds; i++) {
  const t0 = performance.now();
  const sb = await Sandbox.create({ ...o, timeout: 120000 });
  const r = await sb.runCommand("echo", ["hi"]);
  if ((await r.stdout()) !== "hi\n") throw new Error("unexpected output");
  create.push(performance.now() - t0);
  for (let k = 0; k < cmds; k++) {
    const t = performance.now();
    await sb.runCommand("true", []);
    rtt.push(performance.now() - t);
  }
  await sb.delete();
}
console.log(JSON.stringify({ client: "@vercel/sandbox 3.5.0", create, rtt }));
