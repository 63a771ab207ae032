// driver.mjs - cases of the @vercel/sandbox conformance tests, run by
// tests/integration/test_vercel_compat.py: `node driver.mjs CASE` with REBUNO_VERCEL_COMPAT
// and REBUNO_SANDBOX_TOKEN_FILE set. Each case drives the official SDK (and, where the
// point is the wire itself, the same rewritten fetch) and prints one line
// `RESULT <json>` with what it saw; the Python side asserts on it.
import { Sandbox, Drive, APIError } from "@vercel/sandbox";
import { Writable } from "node:stream";
import { WebSocket } from "undici";
import { rebuno } from "./rebuno-vercel.mjs";

const o = rebuno();
const API = "https://vercel.com/api";
const auth = { authorization: `Bearer ${o.token}`, "content-type": "application/json" };
const uniq = () => `vc-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

async function raw(method, path, body) {
  const r = await o.fetch(`${API}${path}?teamId=team_local`, {
    method, headers: auth, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: r.status, type: r.headers.get("content-type"), json, text };
}

async function errOf(p) {
  try { await p; return null; } catch (e) {
    return { name: e.constructor.name, status: e instanceof APIError ? e.response.status : null,
             code: e?.json?.error?.code ?? null, message: String(e.message).slice(0, 300) };
  }
}

const text = async (r) => ({ exit: r.exitCode, out: await r.stdout(), err: await r.stderr() });

const cases = {
  // create / get / list / extend / stop / lazy resume with files intact
  async lifecycle() {
    const name = uniq();
    const sb = await Sandbox.create({ ...o, name, timeout: 120000, env: { GREETING: "hi" },
                                      tags: { suite: "vercel", run: name } });
    const res = { name: sb.name, status: sb.status, timeout: sb.timeout, tags: sb.tags,
                  cwd: sb.cwd, persistent: sb.persistent };
    res.run = await text(await sb.runCommand("sh", ["-c", "echo $GREETING; pwd; echo oops >&2; exit 3"]));
    const got = await Sandbox.get({ ...o, name });
    res.got = { name: got.name, status: got.status };
    const before = sb.expiresAt?.getTime() ?? 0;
    await sb.extendTimeout(60000);
    res.extended = (sb.expiresAt?.getTime() ?? 0) - before;
    const listed = await Sandbox.list({ ...o, tags: { run: name } });
    res.listed = listed.sandboxes.map((s) => s.name);
    const pre = await Sandbox.list({ ...o, namePrefix: name.slice(0, -2) });
    res.prefixed = pre.sandboxes.map((s) => s.name);
    await sb.writeFiles([{ path: "keep.txt", content: Buffer.from("kept across stop") }]);
    const sid1 = sb.currentSession().sessionId;
    await sb.stop();
    res.stopped = sb.status;
    res.afterStop = (await Sandbox.get({ ...o, name, resume: false })).status;
    // the next call meets the stopped session (410), and the SDK resumes it
    res.resumedRead = (await sb.readFileToBuffer({ path: "keep.txt" }))?.toString();
    res.sid1 = sid1;
    res.sid2 = sb.currentSession().sessionId;
    res.statusAfter = sb.status;
    await sb.delete();
    res.gone = await errOf(Sandbox.get({ ...o, name }));
    return res;
  },

  // runCommand with wait: a long command's NDJSON stream, proven live: the command waits
  // for a file the test writes only after it has read the first line.
  async stream() {
    const sb = await Sandbox.create({ ...o, timeout: 120000 });
    const sid = sb.currentSession().sessionId;
    const r = await o.fetch(`${API}/v2/sandboxes/sessions/${sid}/cmd?teamId=t`, {
      method: "POST", headers: auth,
      body: JSON.stringify({ command: "sh", args: ["-c",
        "echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo 'snow ☃ done'; echo e >&2"],
        env: {}, sudo: false, wait: true, logs: true }),
    });
    const type = r.headers.get("content-type");
    const reader = r.body.getReader();
    let buf = "", lines = [], wroteGo = false, rawBytes = [];
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      rawBytes.push(...value);
      buf += Buffer.from(value).toString();
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const l = buf.slice(0, i); buf = buf.slice(i + 1);
        if (!l) continue;
        const j = JSON.parse(l);
        lines.push(j);
        if (j.stream === "stdout" && j.data.includes("first") && !wroteGo) {
          wroteGo = true; // only now may the command go on
          await sb.writeFiles([{ path: "/tmp/go", content: Buffer.from("") }]);
        }
      }
    }
    const ascii = rawBytes.every((b) => b < 0x80);
    // and through the SDK, with the stdout writable fed as it comes
    let seen = "";
    const w = new Writable({ write(c, _e, cb) { seen += c.toString(); cb(); } });
    const fin = await sb.runCommand({ cmd: "sh", args: ["-c", "for i in 1 2 3; do echo line$i; done"], stdout: w });
    await sb.stop();
    return { type, lines, ascii, sdk: { exit: fin.exitCode, out: await fin.stdout(), seen } };
  },

  // detached command; logs read partly; a new client re-attaches (replay, and by offset)
  async detached() {
    const name = uniq();
    const sb = await Sandbox.create({ ...o, name, timeout: 120000 });
    const cmd = await sb.runCommand({ cmd: "sh", detached: true, args: ["-c",
      "echo one; echo two; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo three; exit 7"] });
    const res = { cmdId: cmd.cmdId, exitCodeAtStart: cmd.exitCode };
    const first = [];
    const it = cmd.logs();
    for await (const l of it) { first.push(l.data); if (first.join("").includes("two")) break; }
    it.close?.();
    res.first = first.join("");
    // "reconnect": a fresh SDK object for the same sandbox
    const again = await Sandbox.get({ ...o, name });
    const c2 = await again.getCommand(cmd.cmdId);
    await again.writeFiles([{ path: "/tmp/go", content: Buffer.from("") }]);
    const all = [];
    for await (const l of c2.logs()) all.push(`${l.stream}:${l.data}`);
    res.replay = all.join("");
    const done = await c2.wait();
    res.exit = done.exitCode;
    res.out = await done.stdout();
    // by offset (an extension: what a reconnecting client already has)
    const sid = again.currentSession().sessionId;
    const r = await o.fetch(`${API}/v2/sandboxes/sessions/${sid}/cmd/${cmd.cmdId}/logs?stdoutOffset=8`,
                            { headers: auth });
    res.offsetType = r.headers.get("content-type");
    res.fromOffset = (await r.text()).split("\n").filter(Boolean).map((l) => JSON.parse(l).data).join("");
    await again.stop();
    return res;
  },

  async kill() {
    const sb = await Sandbox.create({ ...o, timeout: 120000 });
    const cmd = await sb.runCommand({ cmd: "sleep", args: ["600"], detached: true });
    await cmd.kill("SIGTERM");
    const done = await cmd.wait();
    const k9 = await sb.runCommand({ cmd: "sleep", args: ["600"], detached: true });
    await k9.kill("SIGKILL");
    const d9 = await k9.wait();
    const missing = await text(await sb.runCommand("no-such-program-here", []));
    const timed = await sb.runCommand({ cmd: "sleep", args: ["60"], timeoutMs: 300 });
    await sb.stop();
    return { term: done.exitCode, kill: d9.exitCode, missing, timedOut: timed.exitCode };
  },

  async files() {
    const sb = await Sandbox.create({ ...o, timeout: 120000 });
    const bin = Buffer.alloc(256 * 40);
    for (let i = 0; i < bin.length; i++) bin[i] = (i * 7 + (i >> 8)) & 0xff;
    const long = "d/" + "x".repeat(120) + "/" + "y".repeat(120) + ".bin"; // PAX names
    await sb.writeFiles([
      { path: "bin.dat", content: bin },
      { path: "/opt/tool/run.sh", content: Buffer.from("#!/bin/sh\necho ran\n"), mode: 0o755 },
      { path: long, content: Buffer.from("deep") },
    ]);
    const back = await sb.readFileToBuffer({ path: "/vercel/sandbox/bin.dat" });
    const res = { same: back && Buffer.compare(back, bin) === 0, size: back?.length };
    res.run = await text(await sb.runCommand("/opt/tool/run.sh", []));
    res.mode = (await text(await sb.runCommand("stat", ["-c", "%a %U", "/opt/tool/run.sh"]))).out.trim();
    res.long = (await sb.readFileToBuffer({ path: long }))?.toString();
    res.missing = await sb.readFileToBuffer({ path: "nope.txt" });
    await sb.mkDir("newdir");
    res.mkdir = (await text(await sb.runCommand("test", ["-d", "/vercel/sandbox/newdir"]))).exit;
    res.mkdirAgain = await errOf(sb.mkDir("newdir"));
    res.mkdirDeep = await errOf(sb.mkDir("a/b/c"));
    res.escape = (await sb.readFileToBuffer({ path: "../../../etc/hostname" }))?.toString().trim().length > 0;
    // the SDK's fs facade runs commands (ls, stat, mv, rm ...) in the sandbox
    await sb.fs.writeFile("/vercel/sandbox/facade.txt", "via the facade");
    res.facade = {
      read: (await sb.fs.readFile("/vercel/sandbox/facade.txt", "utf8")).toString(),
      listed: (await sb.fs.readdir("/vercel/sandbox")).includes("facade.txt"),
      size: (await sb.fs.stat("/vercel/sandbox/facade.txt")).size,
    };
    await sb.fs.rename("/vercel/sandbox/facade.txt", "/vercel/sandbox/moved.txt");
    res.facade.moved = await sb.fs.exists("/vercel/sandbox/moved.txt");
    await sb.fs.rm("/vercel/sandbox/moved.txt");
    res.facade.removed = !(await sb.fs.exists("/vercel/sandbox/moved.txt"));
    await sb.stop();
    return res;
  },

  async users() {
    const sb = await Sandbox.create({ ...o, timeout: 120000 });
    const def = await sb.getDefaultUser();
    const alice = await sb.createUser("alice");
    const who = await text(await alice.runCommand("whoami"));
    const home = await text(await alice.runCommand("pwd"));
    const sudo = await text(await sb.runCommand({ cmd: "id", args: ["-u"], sudo: true }));
    const root = await text(await sb.asUser("root").runCommand("whoami"));
    const again = await errOf(sb.createUser("alice"));
    await sb.stop();
    return { def, who, home, sudo, root, again };
  },

  async fork() {
    const name = uniq();
    const sb = await Sandbox.create({ ...o, name, timeout: 90000, env: { FROM: "parent" },
                                      tags: { kind: "parent" }, resources: { vcpus: 2 } });
    await sb.writeFiles([{ path: "state.txt", content: Buffer.from("parent data") }]);
    const child = await Sandbox.fork({ ...o, sourceSandbox: name, name: name + "-fork" });
    const res = { name: child.name, vcpus: child.vcpus, timeout: child.timeout, tags: child.tags,
                  status: child.status };
    res.env = (await text(await child.runCommand("sh", ["-c", "echo $FROM"]))).out.trim();
    res.file = (await child.readFileToBuffer({ path: "state.txt" }))?.toString();
    await child.writeFiles([{ path: "state.txt", content: Buffer.from("child data") }]);
    res.parentFile = (await sb.readFileToBuffer({ path: "state.txt" }))?.toString();
    await child.stop();
    await sb.stop();
    return res;
  },

  async snapshot() {
    const sb = await Sandbox.create({ ...o, timeout: 120000 });
    await sb.writeFiles([{ path: "snap.txt", content: Buffer.from("in the snapshot") }]);
    const sid = sb.currentSession().sessionId;
    const r = await raw("POST", `/v2/sandboxes/sessions/${sid}/snapshot`, {});
    const snap = await sb.snapshot();
    const res = { rawStatus: r.status, sandboxStopped: r.json?.sandboxStopped, note: r.json?.note,
                  sessionStatus: r.json?.session?.status, snapId: snap.snapshotId,
                  statusAfter: sb.status, sameSession: sb.currentSession().sessionId === sid };
    res.stillRuns = (await text(await sb.runCommand("cat", ["snap.txt"]))).out;
    const from = await Sandbox.create({ ...o, timeout: 60000, source: { type: "snapshot", snapshotId: snap.snapshotId } });
    res.restored = (await from.readFileToBuffer({ path: "snap.txt" }))?.toString();
    res.sourceSnapshotId = from.sourceSnapshotId;
    const g = await raw("GET", `/v2/sandboxes/snapshots/${snap.snapshotId}`);
    res.get = { status: g.status, id: g.json?.snapshot?.id, state: g.json?.snapshot?.status };
    const l = await raw("GET", `/v2/sandboxes/snapshots`);
    res.listed = (l.json?.snapshots ?? []).some((s) => s.id === snap.snapshotId);
    const d = await raw("DELETE", `/v2/sandboxes/snapshots/${snap.snapshotId}`);
    res.deleted = d.json?.snapshot?.status;
    res.createMissing = await errOf(Sandbox.create({ ...o, source: { type: "snapshot", snapshotId: snap.snapshotId } }));
    await from.stop();
    await sb.stop();
    return res;
  },

  async resources() {
    const sb = await Sandbox.create({ ...o, timeout: 60000, resources: { vcpus: 2 } });
    const res = { vcpus: sb.vcpus, memory: sb.memory };

    await sb.update({ resources: { vcpus: 1 } });
    res.updated = (await Sandbox.get({ ...o, name: sb.name })).vcpus;
    res.bad = await errOf(Sandbox.create({ ...o, resources: { vcpus: 100000 } }));
    await sb.stop();
    return res;
  },

  async ports() {
    const sb = await Sandbox.create({ ...o, timeout: 60000, ports: [3000] });
    const res = { routes: sb.routes };
    res.domain = await errOf((async () => sb.domain(3000))());
    await sb.stop();
    return res;
  },

  async image() {
    const d = await Sandbox.create({ ...o, timeout: 60000, image: "default" });
    const res = { image: d.image };
    await d.stop();
    res.unknown = await errOf(Sandbox.create({ ...o, image: "sha256:" + "0".repeat(64) }));
    res.bad = await errOf(Sandbox.create({ ...o, image: "Not a reference!" }));
    res.absent = await errOf(Sandbox.create({ ...o, image: "node:22" }));
    if (process.env.IMAGE_DIGEST) { // imported through /v1 by the test: pinned by digest
      const p = await Sandbox.create({ ...o, timeout: 60000, image: process.env.IMAGE_DIGEST });
      res.pinned = p.image;
      res.fromImage = (await p.readFileToBuffer({ path: "/app/hello.txt" }))?.toString();
      const f = await Sandbox.fork({ ...o, sourceSandbox: p.name });
      res.forkImage = f.image;
      await f.stop();
      await p.stop();
    }
    return res;
  },

  // header transforms applied by the egress proxy, outside the sandbox: the upstream sees
  // the token (checked by the test), the sandbox and the API answers never do
  async network() {
    const token = process.env.NET_TOKEN, rotated = process.env.NET_ROTATED;
    const rule = (v) => ({ allow: { "github.example": [{ transform: [{ headers: { Authorization: v } }] }] } });
    const sb = await Sandbox.create({ ...o, timeout: 120000, networkPolicy: rule(token) });
    const curl = ["-sS", "--max-time", "20", "-H", "Authorization: Bearer made-up-inside",
                  "https://github.example/vercel"];
    const res = { policy: sb.networkPolicy };
    res.first = await text(await sb.runCommand("curl", curl));
    res.inside = (await text(await sb.runCommand("sh", ["-c", "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"]))).out;
    res.other = await text(await sb.runCommand("curl", ["-sS", "--max-time", "10", "https://not-allowed.example/"]));
    await sb.updateNetworkPolicy(rule(rotated));
    res.second = await text(await sb.runCommand("curl", curl));
    await sb.updateNetworkPolicy("deny-all");
    res.denied = await text(await sb.runCommand("curl", curl));
    res.deniedPolicy = (await Sandbox.get({ ...o, name: sb.name })).networkPolicy;
    const r = await raw("GET", `/v2/sandboxes/${sb.name}`);
    res.rawGet = r.text;
    res.subnets = await errOf(sb.updateNetworkPolicy({ subnets: { deny: ["10.0.0.1/8"] } }));
    // subnets: every address allowed lets other hosts through (passthrough, no header);
    // the same with every address denied lets only the named domain through
    const other = ["-sSk", "--max-time", "10", "https://api.example/other"];
    res.domainOnly = await text(await sb.runCommand("curl", other));
    await sb.updateNetworkPolicy({ allow: ["github.example"], subnets: { allow: ["0.0.0.0/0"] } });
    res.anyPolicy = (await Sandbox.get({ ...o, name: sb.name })).networkPolicy;
    res.anyOther = await text(await sb.runCommand("curl", other));
    await sb.updateNetworkPolicy({ allow: ["github.example"], subnets: { allow: ["0.0.0.0/0"], deny: ["0.0.0.0/0"] } });
    res.denyWins = await text(await sb.runCommand("curl", other));
    // a regex matcher has no engine here: refused by field, not ignored
    res.forward = await errOf(sb.updateNetworkPolicy({ allow: { "github.example": [
      { match: { path: { regex: "^/v[0-9]+/" } }, forwardURL: "https://127.0.0.1:1/" }] } }));
    await sb.stop();
    return res;
  },

  // subnets (issue 17): the proxy judges the address it connects to. near.example resolves
  // (overrides in the test) to 127.0.0.1, far.example to 127.0.0.2. The sandbox's DNS
  // answers only allowed domains, so curl --resolve dials each name at an address standing
  // for its upstream (203.0.113.7 -> 127.0.0.1, 203.0.113.8 -> 127.0.0.2): a name only a
  // range allows goes to the address dialled, never looked up
  async subnets() {
    const via = { "near.example": "203.0.113.7", "far.example": "203.0.113.8" };
    const get = async (host, path) => text(await sb.runCommand("curl", ["-sSk", "--max-time", "10",
      "--resolve", `${host}:443:${via[host]}`, `https://${host}${path}`]));
    const sb = await Sandbox.create({ ...o, timeout: 120000,
      networkPolicy: { allow: ["near.example", "far.example"], subnets: { deny: ["127.0.0.1/32"] } } });
    const res = { created: sb.networkPolicy };
    // deny wins over an allowed domain
    res.denyNear = await get("near.example", "/deny-near");
    res.denyFar = await get("far.example", "/deny-far");
    // subnets.allow bypasses the domain list
    await sb.updateNetworkPolicy({ allow: [], subnets: { allow: ["127.0.0.2"] } });
    res.allowFar = await get("far.example", "/allow-far");
    res.allowNear = await get("near.example", "/allow-near");
    // the name is not looked up: dialled at near's address, far.example is judged there
    res.farAtNear = await text(await sb.runCommand("curl", ["-sSk", "--max-time", "10",
      "--resolve", "far.example:443:203.0.113.7", "https://far.example/far-at-near"]));
    res.allowPolicy = (await Sandbox.get({ ...o, name: sb.name })).networkPolicy;
    // deny wins over an allowed range too
    await sb.updateNetworkPolicy({ subnets: { allow: ["127.0.0.0/8"], deny: ["127.0.0.2"] } });
    res.bothFar = await get("far.example", "/both-far");
    res.bothNear = await get("near.example", "/both-near");
    res.badV6 = await errOf(sb.updateNetworkPolicy({ subnets: { allow: ["2001:db8::/32"] } }));
    await sb.stop();
    return res;
  },

  // per-request rules (issue 17): match on path/method/query/header selects a forward or
  // a transform; a response rule (not in SDK 3.5.0's types, so sent on the wire route) is
  // answered by the proxy; an unmatched request passes
  async routing() {
    const token = process.env.NET_TOKEN;
    const curl = (...a) => ["-sS", "--max-time", "20", "-w", "\n%{http_code}", ...a];
    const sb = await Sandbox.create({ ...o, timeout: 120000, networkPolicy: { allow: {
      "api.example": [
        { match: { path: { startsWith: "/fwd/" }, method: ["GET", "POST"] },
          forwardURL: "http://fwd.example/base" },
        { match: { queryString: [{ key: { exact: "tok" }, value: { exact: "yes" } }],
                   headers: [{ key: { exact: "x-want" }, value: { startsWith: "cred" } }] },
          transform: [{ headers: { Authorization: token } }] },
      ] } } });
    const res = { policy: sb.networkPolicy };
    const run = async (...a) => text(await sb.runCommand("curl", curl(...a)));
    res.fwdGet = await run("https://api.example/fwd/a?x=1");
    res.fwdPost = await run("-X", "POST", "--data-binary", "hello", "https://api.example/fwd/b");
    res.putPasses = await run("-X", "PUT", "--data-binary", "x", "https://api.example/fwd/c");
    res.cred = await run("-H", "X-Want: credential", "https://api.example/plain?tok=yes");
    res.noCred = await run("-H", "X-Want: credential", "https://api.example/plain?tok=no");
    const sid = sb.currentSession().sessionId;
    const answer = { allow: { "api.example": [
      { match: { path: { exact: "/answer" } },
        response: { statusCode: 418, body: "short and stout", contentType: "text/plain",
                    headers: { "X-Teapot": "yes" } } },
      { forwardURL: "http://fwd.example/all/" },
    ], "only.example": [{ response: { statusCode: 200, body: "{\"canned\":1}",
                                       contentType: "application/json" } }] } };
    const upd = await raw("POST", `/v2/sandboxes/sessions/${sid}/network-policy`, answer);
    res.update = { status: upd.status, policy: upd.json?.session?.networkPolicy };
    res.teapot = await run("-i", "https://api.example/answer");
    res.canned = await run("https://only.example/anything");
    res.all = await run("https://api.example/other?q=1");
    const again = await Sandbox.get({ ...o, name: sb.name });
    res.view = again.networkPolicy;
    res.bad = await raw("POST", `/v2/sandboxes/sessions/${sid}/network-policy`,
      { allow: { "api.example": [{ response: { statusCode: 99 } }] } });
    await sb.stop();
    return res;
  },

  // a tarball source by URL (a local HTTP server): fetched by the host, extracted into
  // the session cwd; a hostile one and an unreachable one are the create's 400
  async tarball() {
    const base = process.env.TARBALL_BASE;
    const res = {};
    const sb = await Sandbox.create({ ...o, timeout: 60000, source: { type: "tarball", url: `${base}/good.tar.gz` } });
    res.status = sb.status;
    res.hello = (await sb.readFileToBuffer({ path: "hello.txt" }))?.toString();
    const bin = await sb.readFileToBuffer({ path: "dir/bin.dat" });
    res.bin = bin ? [...bin].slice(0, 8).concat([bin.length]) : null;
    res.plain = (await text(await sb.runCommand("cat", ["/vercel/sandbox/plain/p.txt"]))).out;
    await sb.stop();
    const plain = await Sandbox.create({ ...o, timeout: 60000, source: { type: "tarball", url: `${base}/plain.tar` } });
    res.plainTar = (await plain.readFileToBuffer({ path: "plain/p.txt" }))?.toString();
    await plain.stop();
    const before = (await Sandbox.list({ ...o })).sandboxes.length;
    res.dotdot = await errOf(Sandbox.create({ ...o, timeout: 60000, source: { type: "tarball", url: `${base}/dotdot.tar` } }));
    res.missing = await errOf(Sandbox.create({ ...o, timeout: 60000, source: { type: "tarball", url: `${base}/nope.tar` } }));
    res.notTar = await errOf(Sandbox.create({ ...o, timeout: 60000, source: { type: "tarball", url: `${base}/junk.tar.gz` } }));
    res.scheme = await errOf(Sandbox.create({ ...o, timeout: 60000, source: { type: "tarball", url: "file:///etc/passwd" } }));
    res.linkout = await errOf(Sandbox.create({ ...o, timeout: 60000, source: { type: "tarball", url: `${base}/linkout.tar` } }));
    res.left = (await Sandbox.list({ ...o })).sandboxes.length - before;
    return res;
  },

  // a git source cloned inside the sandbox, its credential injected by the egress proxy
  async git() {
    const cred = process.env.NET_CRED;
    const sb = await Sandbox.create({ ...o, timeout: 120000,
      source: { type: "git", url: "https://git.example/repo.git", depth: 1 },
      networkPolicy: { allow: { "git.example": [{ transform: [{ headers: { Authorization: cred } }] }] } } });
    const res = { status: sb.status };
    res.readme = (await sb.readFileToBuffer({ path: "README.md" }))?.toString();
    res.log = (await text(await sb.runCommand("git", ["log", "--oneline"]))).out;
    res.config = (await text(await sb.runCommand("sh", ["-c", "cat .git/config; env"]))).out;
    res.bad = await errOf(Sandbox.create({ ...o, source: { type: "git", url: "file:///etc" } }));
    res.failed = await errOf(Sandbox.create({ ...o, timeout: 60000,
      source: { type: "git", url: "https://git.example/missing.git" },
      networkPolicy: { allow: { "git.example": [{ transform: [{ headers: { Authorization: cred } }] }] } } }));
    await sb.stop();
    return res;
  },

  // drives: get-or-create, mount read-write (committed at stop), mount as a snapshot
  async drives() {
    const dname = uniq();
    const drive = await Drive.getOrCreate({ ...o, name: dname, maxSize: 64 << 20 });
    const again = await Drive.getOrCreate({ ...o, name: dname });
    const res = { name: drive.name, sameId: again.id === drive.id, max: drive.maxSizeBytes ?? drive.maxSize };
    res.listed = (await Drive.list({ ...o, namePrefix: dname })).drives.map((d) => d.name);
    const w = await Sandbox.create({ ...o, timeout: 60000, mounts: { "/data": drive } });
    res.mounts = w.mounts;
    await w.writeFiles([{ path: "/data/kept.txt", content: Buffer.from("on the drive") }]);
    res.busy = await errOf(drive.delete());
    await w.stop(); // commits the drive
    const r = await Sandbox.create({ ...o, timeout: 60000, mounts: { "/ro": drive.snapshot() } });
    res.read = (await r.readFileToBuffer({ path: "/ro/kept.txt" }))?.toString();
    res.roWrite = (await text(await r.runCommand("sh", ["-c", "echo x > /ro/new.txt"]))).exit;
    await r.stop();
    await w.delete();
    await r.delete();
    await drive.delete();
    res.gone = (await Drive.list({ ...o, namePrefix: dname })).drives.length;
    res.badMode = await errOf(Sandbox.create({ ...o, mounts: { "/x": { drive: dname, mode: "weird" } } }));
    return res;
  },

  // list pages (the SDK follows pagination.next as cursor), sessions, update
  async paging() {
    const tag = uniq();
    const made = [];
    for (let i = 0; i < 3; i++)
      made.push((await Sandbox.create({ ...o, name: `${tag}-${i}`, timeout: 60000, tags: { page: tag } })).name);
    const first = await Sandbox.list({ ...o, tags: { page: tag }, limit: 2 });
    const res = { firstPage: first.sandboxes.map((s) => s.name), next: first.pagination.next };
    const second = await Sandbox.list({ ...o, tags: { page: tag }, limit: 2, cursor: first.pagination.next });
    res.secondPage = second.sandboxes.map((s) => s.name);
    res.secondNext = second.pagination.next;
    res.asc = (await Sandbox.list({ ...o, tags: { page: tag }, sortOrder: "asc" })).sandboxes.map((s) => s.name);
    const sb = await Sandbox.get({ ...o, name: made[0] });
    const sessions = await sb.listSessions();
    res.sessions = (sessions.sessions ?? sessions.json?.sessions ?? []).map((x) => x.status);
    await sb.update({ timeout: 90000, tags: { page: tag, updated: "yes" } });
    const after = await Sandbox.get({ ...o, name: made[0] });
    res.updated = { timeout: after.timeout, tags: after.tags };
    for (const n of made) await (await Sandbox.get({ ...o, name: n })).delete();
    return res;
  },

  // openInteractive -> {url, token}; the CLI's WebSocket protocol on it (start frame,
  // binary stdin/stdout, resize, exit); the token is good once
  async interactive() {
    const sb = await Sandbox.create({ ...o, name: uniq(), timeout: 60000 });
    const { url, token } = await sb.openInteractive();
    const res = { url: url.replace(/\/\/[^/]+/, "//HOST"), tokenLen: token.length };
    const term = (tok) => {
      const ws = new WebSocket(`${url}?token=${tok}`);
      ws.binaryType = "arraybuffer";
      const t = { ws, out: "", texts: [], opened: new Promise((ok, no) => {
        ws.addEventListener("open", ok); ws.addEventListener("error", () => no(new Error("ws error")));
      }), closed: new Promise((ok) => ws.addEventListener("close", (e) => ok(e.code))) };
      ws.addEventListener("message", (ev) => {
        if (typeof ev.data === "string") t.texts.push(JSON.parse(ev.data));
        else t.out += Buffer.from(ev.data).toString();
      });
      t.until = async (re) => { for (let i = 0; i < 200 && !re.test(t.out); i++) await new Promise((r) => setTimeout(r, 50)); return re.test(t.out); };
      return t;
    };
    const t = term(token);
    await t.opened;
    t.ws.send(JSON.stringify({ type: "start", command: "/bin/sh", args: [], env: ["GREETING=hello"],
                               cwd: "/vercel/sandbox", cols: 100, rows: 30 }));
    t.ws.send(new TextEncoder().encode("stty size\n"));
    res.firstSize = await t.until(/30 100/);
    t.ws.send(JSON.stringify({ type: "resize", cols: 120, rows: 40 }));
    t.ws.send(new TextEncoder().encode("stty size; echo $GREETING-$(pwd); tty; exit 7\n"));
    res.closeCode = await t.closed;
    res.resized = /40 120/.test(t.out);
    res.envCwd = /hello-\/vercel\/sandbox/.test(t.out);
    res.tty = /\/dev\/pts\//.test(t.out);
    res.texts = t.texts;
    // the token was used: a second socket with it is refused
    const again = term(token);
    res.reuse = await again.opened.then(() => "opened", (e) => "refused");
    // a socket that goes away before its terminal ends takes the terminal with it
    const k = await sb.openInteractive();
    const t2 = (() => { const x = new WebSocket(`${k.url}?token=${k.token}`); return x; })();
    await new Promise((ok) => t2.addEventListener("open", ok));
    t2.send(JSON.stringify({ type: "start", command: "/bin/sh", args: ["-c", "echo $$ > /tmp/pty.pid; exec sleep 300"] }));
    const pidFile = async () => (await sb.readFileToBuffer({ path: "/tmp/pty.pid" }))?.toString().trim();
    let pid;
    for (let i = 0; i < 100 && !(pid = await pidFile()); i++) await new Promise((r) => setTimeout(r, 50));
    t2.close();
    let alive = true;
    for (let i = 0; i < 100 && alive; i++) {
      await new Promise((r) => setTimeout(r, 50));
      alive = (await sb.runCommand("sh", ["-c", `kill -0 ${pid} 2>/dev/null`])).exitCode === 0;
    }
    res.killedOnClose = Boolean(pid) && !alive;
    res.badStart = await (async () => {
      const b = await sb.openInteractive();
      const x = term(b.token.replace(/./, (c) => (c === "a" ? "b" : "a")));
      return await x.opened.then(() => "opened", () => "refused");
    })();
    // the session stopping ends the terminal: the exit frame, then the close
    const k3 = await sb.openInteractive();
    const t3 = term(k3.token);
    await t3.opened;
    t3.ws.send(JSON.stringify({ type: "start", command: "/bin/sh", args: ["-c", "echo started; exec sleep 300"] }));
    res.started = await t3.until(/started/);
    await sb.stop();
    res.stopClose = await t3.closed;
    res.stopTexts = t3.texts;
    return res;
  },

  async errors() {
    const res = {};
    res.getUnknown = await errOf(Sandbox.get({ ...o, name: "no-such-sandbox-" + uniq() }));
    const name = uniq();
    const sb = await Sandbox.create({ ...o, name, timeout: 60000 });
    res.dupName = await errOf(Sandbox.create({ ...o, name }));
    const sid = sb.currentSession().sessionId;
    await sb.stop();
    const r = await raw("POST", `/v2/sandboxes/sessions/${sid}/cmd`, { command: "true", args: [] });
    res.stoppedSession = { status: r.status, code: r.json?.error?.code };
    const u = await raw("POST", `/v2/sandboxes/sessions/sbs_nope_1/cmd`, { command: "true", args: [] });
    res.unknownSession = { status: u.status, code: u.json?.error?.code };
    const bad = await raw("POST", `/v3/sandboxes`, { timeout: "soon" });
    res.badField = { status: bad.status, field: bad.json?.error?.field };
    const noauth = await o.fetch(`${API}/v2/sandboxes?teamId=x`, { headers: { authorization: "Bearer wrong" } });
    res.noauth = noauth.status;
    res.getOrCreate = (await Sandbox.getOrCreate({ ...o, name: name + "-goc", timeout: 60000 })).name;
    await (await Sandbox.get({ ...o, name: name + "-goc" })).stop();
    return res;
  },
};

const name = process.argv[2];
if (!cases[name]) {
  console.error(`unknown case ${name}; cases: ${Object.keys(cases).join(" ")}`);
  process.exit(2);
}
const out = await cases[name]();
console.log("RESULT " + JSON.stringify(out));
