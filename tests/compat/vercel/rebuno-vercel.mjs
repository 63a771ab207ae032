// rebuno-vercel.mjs - point the official @vercel/sandbox SDK at a local sandboxd's
// Vercel-compatible endpoint (docs/vercel.md). One line in user code:
//
//   import { rebuno } from "./rebuno-vercel.mjs";
//   const sandbox = await Sandbox.create({ ...rebuno(), timeout: 60_000 });
//
// The SDK's base URL is fixed (https://vercel.com/api), so this passes its public `fetch`
// option with a fetch that rewrites that prefix to the local endpoint (and installs it as
// globalThis.fetch, which a few SDK paths use), plus the credentials it requires: the
// daemon's local token, and any team and project (accepted and ignored locally).
//
// Settings: REBUNO_VERCEL_COMPAT (the endpoint, default http://127.0.0.1:8092), the token
// from REBUNO_SANDBOX_TOKEN, else the file REBUNO_SANDBOX_TOKEN_FILE (sandboxd's
// <state>/local-token), else this user's registry of local daemons
// (${XDG_CONFIG_HOME:-~/.config}/rebuno/local/, the entry of a running sandboxd).
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";

const VERCEL_API = "https://vercel.com/api";

// The fetch the rewritten requests go through: the SDK passes every request an Agent of
// the npm undici it depends on (`dispatcher`), and Node's built-in fetch (an older undici
// inside Node) driving that foreign Agent bridges each request and body between the two;
// that undici's own fetch does not, which cut the client's CPU per command by 0.2-0.3 ms
// (of ~1.2) in bench/vercel_compat.sh. Node's fetch where that undici is not installed.
function defaultFetch() {
  try {
    const f = createRequire(import.meta.url)("undici").fetch;
    if (typeof f === "function") return f;
  } catch {}
  return globalThis.fetch;
}

function readToken(file) {
  try {
    const j = JSON.parse(fs.readFileSync(file, "utf8"));
    return typeof j.token === "string" ? j : null;
  } catch {
    return null;
  }
}

export function localToken(env = process.env) {
  if (env.REBUNO_SANDBOX_TOKEN) return env.REBUNO_SANDBOX_TOKEN;
  if (env.REBUNO_SANDBOX_TOKEN_FILE) {
    const j = readToken(env.REBUNO_SANDBOX_TOKEN_FILE);
    if (j) return j.token;
  }
  const dir = path.join(env.XDG_CONFIG_HOME || path.join(os.homedir(), ".config"), "rebuno", "local");
  let names = [];
  try {
    names = fs.readdirSync(dir);
  } catch {}
  for (const n of names) {
    const j = readToken(path.join(dir, n));
    if (j && j.service === "sandboxd") return j.token;
  }
  throw new Error("no sandboxd token: start `rebuno dev` (or sandboxd) as this user, or set " +
                  "REBUNO_SANDBOX_TOKEN / REBUNO_SANDBOX_TOKEN_FILE");
}

// A fetch that sends the SDK's requests to base instead of https://vercel.com/api.
export function rewritingFetch(base, inner = globalThis.fetch) {
  const to = base.replace(/\/+$/, "");
  return (input, init) => {
    const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
    if (url.startsWith(VERCEL_API)) return inner(to + url.slice(VERCEL_API.length), init);
    if (url.startsWith("https://") || url.startsWith("http://")) {
      const u = new URL(url);
      if (!["127.0.0.1", "localhost", "[::1]"].includes(u.hostname))
        return Promise.reject(new Error(`rebuno-vercel: refusing a non-local request to ${u.origin}`));
    }
    return inner(input, init);
  };
}

// {fetch, token, teamId, projectId}: spread it into Sandbox.create/get/list(...).
export function rebuno(opts = {}) {
  const env = opts.env || process.env;
  const base = opts.url || env.REBUNO_VERCEL_COMPAT || "http://127.0.0.1:8092";
  if (!globalThis.__rebunoInnerFetch) globalThis.__rebunoInnerFetch = defaultFetch();
  const f = rewritingFetch(base, opts.fetch || globalThis.__rebunoInnerFetch);
  globalThis.fetch = f;
  return { fetch: f, token: opts.token || localToken(env), teamId: "team_local", projectId: "prj_local" };
}
