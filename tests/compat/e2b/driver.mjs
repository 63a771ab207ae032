// driver.mjs - one case of the e2b SDK (npm e2b, pinned) against sandboxd's
// E2B-compatible endpoint: `node driver.mjs CASE`. The endpoint comes from
// REBUNO_E2B_COMPAT (E2B_API_URL = E2B_SANDBOX_URL = it) and the key from sandboxd's
// local-token file (REBUNO_SANDBOX_TOKEN_FILE). Prints "RESULT <json>" of what the SDK
// saw; tests/integration/test_e2b_compat.py makes the assertions.
import { readFileSync } from 'node:fs'
import * as e2b from 'e2b'

const { Sandbox } = e2b
const url = process.env.REBUNO_E2B_COMPAT
process.env.E2B_API_URL = url
process.env.E2B_SANDBOX_URL = url
process.env.E2B_API_KEY = JSON.parse(readFileSync(process.env.REBUNO_SANDBOX_TOKEN_FILE, 'utf8')).token

const errName = (e) => {
  for (const n of ['SandboxNotFoundError', 'FileNotFoundError', 'NotFoundError', 'CommandExitError',
    'InvalidArgumentError', 'AuthenticationError', 'TimeoutError', 'SandboxError']) {
    if (e2b[n] && e instanceof e2b[n]) return n
  }
  return e?.constructor?.name ?? String(e)
}
const catching = async (f) => { try { return { ok: await f() } } catch (e) { return { error: errName(e), message: String(e.message ?? e) } } }
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const tag = `t${process.pid}-${Date.now()}`

const cases = {
  async lifecycle() {
    const sbx = await Sandbox.create('base', { timeoutMs: 120_000, metadata: { suite: 'e2b', run: tag } })
    const info = await sbx.getInfo()
    const listed = await Sandbox.list({ query: { metadata: { run: tag }, state: ['running'] } }).nextItems()
    const none = await Sandbox.list({ query: { metadata: { run: tag + 'x' } } }).nextItems()
    const running = await sbx.isRunning()
    await sbx.setTimeout(60_000)
    const info2 = await sbx.getInfo()
    const again = await Sandbox.connect(sbx.sandboxId)
    const hello = await again.commands.run('echo hello')
    const killed = await sbx.kill()
    const killedAgain = await Sandbox.kill(sbx.sandboxId)
    const gone = await catching(() => Sandbox.getInfo(sbx.sandboxId))
    const goneConnect = await catching(() => Sandbox.connect(sbx.sandboxId))
    return {
      id: sbx.sandboxId, info: { state: info.state, metadata: info.metadata, templateId: info.templateId,
        endAt: info.endAt, startedAt: info.startedAt }, endAt2: info2.endAt,
      listed: listed.map((s) => s.sandboxId), none: none.length, running, hello: hello.stdout,
      killed, killedAgain, gone, goneConnect,
    }
  },

  async commands() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000, envs: { FROM_CREATE: 'c1' } })
    try {
      const r = await sbx.commands.run('echo out; echo err >&2; echo "$FROM_CREATE $FROM_RUN"; pwd; whoami',
        { envs: { FROM_RUN: 'r1' } })
      const cwd = await sbx.commands.run('pwd', { cwd: '/tmp' })
      const root = await sbx.commands.run('whoami; echo $HOME', { user: 'root' })
      const fail = await catching(() => sbx.commands.run('echo partial; exit 3'))
      let exitErr = null
      try { await sbx.commands.run('echo partial; exit 3') } catch (e) { exitErr = { exitCode: e.exitCode, stdout: e.stdout } }
      // streaming: callbacks see each line as it comes
      const seen = []
      const streamed = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.1; done; echo e1 >&2',
        { onStdout: (d) => seen.push(['out', d]), onStderr: (d) => seen.push(['err', d]) })
      // background with stdin: cat echoes what is sent, then closing stdin ends it
      const outs = []
      const h = await sbx.commands.run('cat', { background: true, stdin: true, onStdout: (d) => outs.push(d) })
      await sbx.commands.sendStdin(h.pid, 'ping\n')
      for (let i = 0; i < 50 && !outs.join('').includes('ping'); i++) await sleep(100)
      const listed = (await sbx.commands.list()).map((p) => ({ pid: p.pid, cmd: p.cmd, args: p.args }))
      await sbx.commands.closeStdin(h.pid)
      const catRes = await h.wait()
      // kill a running one: it ends by signal
      const sl = await sbx.commands.run('sleep 60', { background: true })
      const extra = []
      const conn = await sbx.commands.connect(sl.pid, { onStdout: (d) => extra.push(d) })
      const killed = await sbx.commands.kill(sl.pid)
      const killRes = await catching(() => conn.wait())
      let killExit = null
      try { await sl.wait() } catch (e) { killExit = e.exitCode }
      const killMissing = await sbx.commands.kill(999999)
      const sendMissing = await catching(() => sbx.commands.sendStdin(999999, 'x'))
      const connMissing = await catching(() => sbx.commands.connect(999999))
      const bash = await sbx.commands.run('echo $0; shopt -q login_shell && echo login')
      return {
        out: r.stdout, err: r.stderr, exit: r.exitCode, cwd: cwd.stdout, root: root.stdout,
        fail, exitErr, seen, streamed: streamed.stdout, cat: catRes.stdout, catExit: catRes.exitCode,
        listed, catPid: h.pid, killed, killRes, killExit, killMissing, sendMissing, connMissing,
        bash: bash.stdout,
      }
    } finally {
      await sbx.kill()
    }
  },

  async files() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000 })
    try {
      const w = await sbx.files.write('notes/a.txt', 'hello files\n')
      const text = await sbx.files.read('notes/a.txt')
      const bytes = new Uint8Array(256).map((_, i) => i)
      await sbx.files.write('/tmp/bin.dat', bytes)
      const back = await sbx.files.read('/tmp/bin.dat', { format: 'bytes' })
      const multi = await sbx.files.write([
        { path: '/tmp/m/one.txt', data: 'one' },
        { path: 'm2/two.txt', data: 'two' },
      ])
      const seenByShell = await sbx.commands.run('cat /tmp/m/one.txt ~/m2/two.txt; stat -c %U ~/notes/a.txt')
      const empty = await sbx.files.write('/tmp/empty', '')
      const emptyBack = await sbx.files.read('/tmp/empty')
      const missing = await catching(() => sbx.files.read('/nope/missing.txt'))
      const big = 'x'.repeat(3 * 1024 * 1024)
      await sbx.files.write('/tmp/big.txt', big)
      const bigBack = await sbx.files.read('/tmp/big.txt')
      // signed URLs, fetched with no SDK headers
      const dlUrl = await sbx.downloadUrl('notes/a.txt', { useSignatureExpiration: 60 })
      const signedRead = await (await fetch(dlUrl)).text()
      const upUrl = await sbx.uploadUrl('signed/up.txt', { useSignatureExpiration: 60 })
      const form = new FormData()
      form.append('file', new Blob(['via signed url']), 'signed/up.txt')
      const upStatus = (await fetch(upUrl, { method: 'POST', body: form })).status
      const signedBack = await sbx.files.read('signed/up.txt')
      const expired = await fetch(await sbx.downloadUrl('notes/a.txt', { useSignatureExpiration: -10 }))
      const forged = await fetch(dlUrl.replace(/signature=[^&]+/, 'signature=v1_AAAA'))
      const otherPath = await fetch(dlUrl.replace('notes%2Fa.txt', 'notes%2Fb.txt').replace('notes/a.txt', 'notes/b.txt'))
      return {
        signedRead, upStatus, signedBack, expired: [expired.status, await expired.json()],
        forged: forged.status, otherPath: otherPath.status,
        w, text, bytesOk: Buffer.from(back).equals(Buffer.from(bytes)), multi, shell: seenByShell.stdout,
        empty, emptyBack, missing, bigOk: bigBack === big,
      }
    } finally {
      await sbx.kill()
    }
  },

  async filesystem() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000 })
    try {
      await sbx.files.write('proj/src/main.py', 'print(1)\n')
      await sbx.files.write('proj/README', 'r')
      const info = await sbx.files.getInfo('proj/src/main.py')
      const dirInfo = await sbx.files.getInfo('/home/user/proj')
      const list1 = (await sbx.files.list('proj')).map((e) => [e.name, e.type, e.path]).sort()
      const list2 = (await sbx.files.list('proj', { depth: 2 })).map((e) => e.path)  // envd's walk order
      const madeInfo = await sbx.files.makeDir('mk/a/b').then(() => sbx.files.getInfo('mk/a'))
      // directories: ext4's size (whole blocks, at least one), as envd reports on E2B
      await sbx.commands.run('mkdir ~/big && cd ~/big && for i in $(seq 200); do : > file-with-a-long-name-$i; done')
      const dirSizes = [(await sbx.files.getInfo('mk/a/b')).size, (await sbx.files.list('mk/a'))[0].size,
        (await sbx.files.getInfo('big')).size]
      const exists = await sbx.files.exists('proj/README')
      const notExists = await sbx.files.exists('proj/nope')
      const made = await sbx.files.makeDir('proj/new/deep')
      const madeAgain = await sbx.files.makeDir('proj/new/deep')
      const renamed = await sbx.files.rename('proj/README', 'proj/README.md')
      const oldGone = await sbx.files.exists('proj/README')
      await sbx.files.remove('proj/new')
      const removedGone = await sbx.files.exists('proj/new')
      const removeMissing = await catching(() => sbx.files.remove('proj/never-there'))
      const listMissing = await catching(() => sbx.files.list('/no/such/dir'))
      const infoMissing = await catching(() => sbx.files.getInfo('/no/such/file'))
      // watch: events for writes made by a command inside, relative names, recursive
      const events = []
      const wh = await sbx.files.watchDir('proj', (ev) => events.push([ev.type, ev.name]), { recursive: true })
      // (a directory is watched once its create event is seen: write into it after that)
      await sbx.commands.run('mkdir -p ~/proj/w')
      for (let i = 0; i < 50 && !events.some((e) => e[1] === 'w'); i++) await sleep(100)
      await sbx.commands.run('echo a > ~/proj/w/f.txt && echo b > ~/proj/top.txt && rm ~/proj/top.txt')
      for (let i = 0; i < 50 && !events.some((e) => e[1] === 'top.txt' && e[0] === 'remove'); i++) await sleep(100)
      await wh.stop()
      // envd 0.6.3: includeEntry gives each event the entry as it is then
      const withEntry = []
      const we = await sbx.files.watchDir('proj', (ev) => withEntry.push([ev.type, ev.name, ev.entry ? [ev.entry.type, ev.entry.path, ev.entry.size, ev.entry.owner] : null]), { includeEntry: true })
      await sbx.commands.run('printf 12345 > ~/proj/e.txt')
      for (let i = 0; i < 50 && !withEntry.some((e) => e[1] === 'e.txt' && e[0] === 'write'); i++) await sleep(100)
      await sbx.commands.run('rm ~/proj/e.txt')
      for (let i = 0; i < 50 && !withEntry.some((e) => e[1] === 'e.txt' && e[0] === 'remove'); i++) await sleep(100)
      await we.stop()
      // envd 0.6.4: allowNetworkMounts only lifts a restriction; a local directory watches the same
      const netSeen = []
      const wn = await sbx.files.watchDir('proj', (ev) => netSeen.push([ev.type, ev.name]), { allowNetworkMounts: true })
      await sbx.files.write('proj/net.txt', 'n')
      for (let i = 0; i < 50 && !netSeen.some((e) => e[1] === 'net.txt' && e[0] === 'write'); i++) await sleep(100)
      await wn.stop()
      return {
        netSeen,
        withEntry, dirSizes,
        info: { name: info.name, type: info.type, path: info.path, size: info.size, owner: info.owner,
          group: info.group, permissions: info.permissions, mode: info.mode,
          modified: String(info.modifiedTime) },
        dirType: dirInfo.type, madeDir: [madeInfo.mode, madeInfo.permissions, madeInfo.owner, madeInfo.group], list1, list2, exists, notExists, made, madeAgain, renamed: renamed.path,
        oldGone, removedGone, removeMissing, listMissing, infoMissing, events,
      }
    } finally {
      await sbx.kill()
    }
  },

  async pause() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { run: tag } })
    await sbx.files.write('/tmp/state.txt', 'kept')
    const bg = await sbx.commands.run('sleep 300', { background: true, timeoutMs: 0 })
    const paused = await sbx.pause()
    const pausedAgain = await Sandbox.pause(sbx.sandboxId)
    const infoPaused = await Sandbox.getInfo(sbx.sandboxId)
    const listedPaused = (await Sandbox.list({ query: { metadata: { run: tag }, state: ['paused'] } }).nextItems()).map((s) => s.sandboxId)
    const listedRunning = (await Sandbox.list({ query: { metadata: { run: tag }, state: ['running'] } }).nextItems()).length
    const back = await Sandbox.connect(sbx.sandboxId)
    const infoBack = await back.getInfo()
    const file = await back.files.read('/tmp/state.txt')
    const procs = (await back.commands.list()).map((p) => p.pid)
    // on_timeout pause: the sandbox pauses itself after its timeout
    const auto = await Sandbox.create({ timeoutMs: 2_000, lifecycle: { onTimeout: 'pause' } })
    await auto.files.write('/tmp/a.txt', 'auto')
    let autoState = null
    for (let i = 0; i < 100; i++) {
      autoState = (await Sandbox.getInfo(auto.sandboxId)).state
      if (autoState === 'paused') break
      await sleep(100)
    }
    const autoBack = await Sandbox.connect(auto.sandboxId, { timeoutMs: 60_000 })
    const autoFile = await autoBack.files.read('/tmp/a.txt')
    const autoLifecycle = (await autoBack.getInfo()).lifecycle
    await autoBack.kill()
    await back.kill()
    // a filesystem-only pause (keepMemory: false): processes end, files stay
    const fsOnly = await Sandbox.create({ timeoutMs: 120_000 })
    await fsOnly.files.write('/home/user/keep.txt', 'kept')
    const bg2 = await fsOnly.commands.run('sleep 300', { background: true, timeoutMs: 0 })
    const fsPaused = await fsOnly.pause({ keepMemory: false })
    const fsState = (await Sandbox.getInfo(fsOnly.sandboxId)).state
    const fsBack = await Sandbox.connect(fsOnly.sandboxId)
    const fsFile = await fsBack.files.read('/home/user/keep.txt')
    const fsProcs = (await fsBack.commands.list()).map((p) => p.pid)
    // onResume: 'reboot' on a memory-kept pause drops that memory too
    const bg3 = await fsBack.commands.run('sleep 300', { background: true, timeoutMs: 0 })
    await fsBack.pause()
    const rebooted = await Sandbox.connect(fsOnly.sandboxId, { onResume: 'reboot' })
    const rbProcs = (await rebooted.commands.list()).map((p) => p.pid)
    const rbFile = await rebooted.files.read('/home/user/keep.txt')
    await rebooted.kill()
    // autoPauseMemory: false: the timeout's pause keeps the files only
    const autoFs = await Sandbox.create({ timeoutMs: 120_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
    return { paused, pausedAgain, infoPaused: infoPaused.state, listedPaused, listedRunning,
      infoBack: infoBack.state, file, bgAlive: procs.includes(bg.pid), autoState, autoFile, autoLifecycle, id: sbx.sandboxId,
      fsPaused, fsState, fsFile, bg2Alive: fsProcs.includes(bg2.pid), bg3Alive: rbProcs.includes(bg3.pid), rbFile,
      autoFs: autoFs.sandboxId }
  },

  async snapshots() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { run: tag } })
    await sbx.files.write('snap.txt', 'at snapshot')
    const snap = await sbx.createSnapshot()
    await sbx.files.write('snap.txt', 'after snapshot')
    const stillRunning = (await sbx.getInfo()).state
    const listed = (await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()).map((x) => x.snapshotId)
    const restored = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })
    const restoredFile = await restored.files.read('snap.txt')
    const forks = await sbx.fork({ count: 2, timeoutMs: 60_000 })
    const forkFiles = []
    for (const f of forks) {
      forkFiles.push(f instanceof Error ? String(f) : await f.files.read('snap.txt'))
    }
    const forkIds = forks.map((f) => f.sandboxId)
    const badFork = await catching(() => Sandbox.connect('no-such').then((x) => x.fork()))
    const deleted = await Sandbox.deleteSnapshot(snap.snapshotId)
    const deletedAgain = await Sandbox.deleteSnapshot(snap.snapshotId)
    for (const f of forks) if (!(f instanceof Error)) await f.kill()
    await restored.kill()
    await sbx.kill()
    return { snapshotId: snap.snapshotId, stillRunning, listed, restoredFile, forkFiles,
      forkIds, srcId: sbx.sandboxId, badFork, deleted, deletedAgain }
  },

  async snapnames() {
    // names are kept with the snapshot: listed, filtered on, and a create by name restores
    // the newest of that name (E2B assigns a name's latest build)
    const name = process.env.SNAP_NAME
    const sbx = await Sandbox.create({ timeoutMs: 120_000 })
    try {
      await sbx.files.write('v.txt', 'one')
      const first = await sbx.createSnapshot({ name })
      await sbx.files.write('v.txt', 'two')
      const second = await sbx.createSnapshot({ name })
      const unnamed = await sbx.createSnapshot()
      const all = (await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems())
        .map((x) => [x.snapshotId, x.names])
      const byName = (await Sandbox.listSnapshots({ name }).nextItems()).map((x) => x.snapshotId)
      const byId = (await Sandbox.listSnapshots({ name: unnamed.snapshotId }).nextItems()).map((x) => x.snapshotId)
      const none = await Sandbox.listSnapshots({ name: name + '-does-not-exist' }).nextItems()
      const restored = await Sandbox.create(name, { timeoutMs: 60_000 })
      const restoredFile = await restored.files.read('v.txt')
      await restored.kill()
      const badName = await catching(() => sbx.createSnapshot({ name: 'bad name!' }))
      return { first: [first.snapshotId, first.names], second: [second.snapshotId, second.names],
        unnamed: [unnamed.snapshotId, unnamed.names], all, byName, byId, none: none.length,
        restoredFile, badName }
    } finally {
      await sbx.kill()
    }
  },

  async bootid() {
    // each session is a boot of its own: a filesystem-only pause (a stop) reboots, a
    // pause with memory (the freezer) does not
    const sbx = await Sandbox.create({ timeoutMs: 120_000 })
    const boot = async () => (await sbx.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout.trim()
    try {
      const first = await boot()
      await sbx.pause()
      await sbx.connect()
      const afterFreeze = await boot()
      await sbx.pause({ keepMemory: false })
      await sbx.connect()
      const afterStop = await boot()
      const writable = await catching(() => sbx.commands.run('echo x > /proc/sys/kernel/random/boot_id', { user: 'root' }))
      return { first, afterFreeze, afterStop, writable: writable.error ?? 'written' }
    } finally {
      await sbx.kill()
    }
  },

  async network() {
    const host = process.env.E2B_TEST_HOST
    const token = process.env.E2B_TEST_TOKEN
    const sbx = await Sandbox.create({ timeoutMs: 120_000, network: { denyOut: [e2b.ALL_TRAFFIC ?? '0.0.0.0/0'], allowOut: [host] } })
    try {
      const before = await catching(() => sbx.commands.run(`curl -sSk https://${host}/before`))
      await sbx.updateNetwork({ denyOut: ['0.0.0.0/0'],
        rules: { [host]: [{ transform: { headers: { Authorization: `Bearer ${token}` } } }] } })
      const after = await catching(() => sbx.commands.run(`curl -sS https://${host}/after -H 'Authorization: made-up-inside'`))
      const denied = await catching(() => sbx.commands.run('curl -sS --max-time 5 https://denied.example/'))
      const inside = await sbx.commands.run("env; for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null; true")
      const badCidr = await catching(() => sbx.updateNetwork({ allowOut: ['10.0.0.1/8'] }))
      const badDeny = await catching(() => sbx.updateNetwork({ denyOut: ['evil.example'] }))
      return { before, after, denied, leaked: inside.stdout.includes(token), insideLen: inside.stdout.length,
        badCidr, badDeny }
    } finally {
      await sbx.kill()
    }
  },

  // allowOut/denyOut addresses and ranges (the proxy judges the address it connects to:
  // E2B_TEST_NEAR resolves to 127.0.0.1, E2B_TEST_FAR to 127.0.0.2, E2B_TEST_THIRD to
  // 127.0.0.1; E2B_TEST_LITERAL (an IP literal) is sent to 127.0.0.2 and
  // E2B_TEST_NEAR_IP to 127.0.0.1: overrides in the test)
  async cidr() {
    const near = process.env.E2B_TEST_NEAR, far = process.env.E2B_TEST_FAR
    const third = process.env.E2B_TEST_THIRD, literal = process.env.E2B_TEST_LITERAL
    const nearIp = process.env.E2B_TEST_NEAR_IP
    // --resolve: the sandbox's DNS answers only names a domain allows. A name a domain
    // (or "*") allows is resolved by the proxy itself; one only an address allows goes to
    // the address dialled, so each name is dialled at an address standing for its upstream
    const via = { [near]: nearIp, [third]: nearIp, [far]: literal }
    const get = (host, path) => sbx.commands.run(
      `curl -sSk --max-time 10 --resolve ${host}:443:${via[host]} https://${host}${path}`)
    const sbx = await Sandbox.create({ timeoutMs: 120_000, network: { denyOut: ['127.0.0.1'] } })
    try {
      const res = {}
      // 1. denyOut of one address: that upstream is refused, the others pass
      res.denyNear = await catching(() => get(near, '/deny-near'))
      res.denyFar = await catching(() => get(far, '/deny-far'))
      res.info1 = (await sbx.getInfo()).network
      // 2. allowOut of an address allows it with no domain rule (everything else denied);
      //    an IP literal without SNI is judged by its address too
      await sbx.updateNetwork({ denyOut: [e2b.ALL_TRAFFIC ?? '0.0.0.0/0'], allowOut: ['127.0.0.2/32'] })
      res.allowFar = await catching(() => get(far, '/allow-far'))
      // the name is not looked up: dialled at near's address, far.example is judged there
      res.farAtNear = await catching(() => sbx.commands.run(
        `curl -sSk --max-time 10 --resolve ${far}:443:${nearIp} https://${far}/far-at-near`))
      res.allowNear = await catching(() => get(near, '/allow-near'))
      res.literal = await catching(() => sbx.commands.run(`curl -sSk --max-time 10 https://${literal}/literal`))
      res.info2 = (await sbx.getInfo()).network
      // 3. allowOut wins over denyOut: a named domain and an allowed address inside a denied
      //    range pass; a host only "*" allows, inside it, does not
      await sbx.updateNetwork({ denyOut: ['127.0.0.0/8'], allowOut: [near, '127.0.0.2'] })
      res.winsNear = await catching(() => get(near, '/wins-near'))
      res.winsFar = await catching(() => get(far, '/wins-far'))
      res.winsThird = await catching(() => get(third, '/wins-third'))
      res.info3 = (await sbx.getInfo()).network
      res.badV6 = await catching(() => sbx.updateNetwork({ denyOut: ['2001:db8::/32'] }))
      // 4. everything allowed (no ranges): an IP literal without SNI passes too, as on E2B
      await sbx.updateNetwork({})
      res.literalAll = await catching(() => sbx.commands.run(`curl -sSk --max-time 10 https://${literal}/literal-all`))
      return res
    } finally {
      await sbx.kill()
    }
  },

  async pty() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000 })
    try {
      const dec = new TextDecoder()
      let out = ''
      const waitFor = async (re) => { for (let i = 0; i < 100 && !re.test(out); i++) await sleep(100); return re.test(out) }
      const t = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }) }, timeoutMs: 0 })
      const enc = new TextEncoder()
      await sbx.pty.sendInput(t.pid, enc.encode('echo hi-$((1+2)); tty; whoami\n'))
      const sawHi = await waitFor(/hi-3/)
      const sawTty = await waitFor(/\/dev\/pts\/\d+/)
      await sbx.pty.resize(t.pid, { cols: 100, rows: 30 })
      await sbx.pty.sendInput(t.pid, enc.encode('stty size\n'))
      const sawSize = await waitFor(/30 100/)
      const listed = (await sbx.commands.list()).some((p) => p.pid === t.pid)
      // a new client for the same terminal: the old one ends, the terminal runs on
      await t.disconnect()
      let out2 = ''
      const t2 = await sbx.pty.connect(t.pid, { onData: (d) => { out2 += dec.decode(d, { stream: true }) } })
      await sbx.pty.sendInput(t.pid, enc.encode('echo again-$((2*3))\n'))
      for (let i = 0; i < 100 && !/again-6/.test(out2); i++) await sleep(100)
      const sawAgain = /again-6/.test(out2)
      await sbx.pty.sendInput(t.pid, enc.encode('exit 7\n'))
      let exitCode = null
      try { await t2.wait(); exitCode = 0 } catch (e) { exitCode = e.exitCode }
      const k = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {}, timeoutMs: 0 })
      const killed = await sbx.pty.kill(k.pid)
      let killExit = null
      try { await k.wait() } catch (e) { killExit = e.exitCode }
      const killMissing = await sbx.pty.kill(999999)
      const badResize = await catching(() => sbx.pty.resize(999999, { cols: 10, rows: 10 }))
      return { sawHi, sawTty, whoami: /\nuser\r?\n/.test(out), sawSize, listed, sawAgain, exitCode, killed, killExit, killMissing, badResize }
    } finally {
      await sbx.kill()
    }
  },

  async killgone() {
    // kill answers once the process is reaped: the next List and `kill -0` no longer see it
    const sbx = await Sandbox.create({ timeoutMs: 120_000 })
    try {
      const rounds = []
      for (let i = 0; i < 5; i++) {
        const c = await sbx.commands.run('sleep 60', { background: true })
        const t = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {}, timeoutMs: 0 })
        const cKilled = await sbx.commands.kill(c.pid)
        const tKilled = await sbx.pty.kill(t.pid)
        const listed = (await sbx.commands.list()).map((p) => p.pid)
        const cProbe = await catching(() => sbx.commands.run(`kill -0 ${c.pid}`))
        const tProbe = await catching(() => sbx.commands.run(`kill -0 ${t.pid}`))
        let cExit = null, tExit = null
        try { await c.wait() } catch (e) { cExit = e.exitCode }
        try { await t.wait() } catch (e) { tExit = e.exitCode }
        rounds.push({ cKilled, tKilled, cListed: listed.includes(c.pid), tListed: listed.includes(t.pid),
          cProbe: cProbe.error ?? 'alive', tProbe: tProbe.error ?? 'alive', cExit, tExit })
      }
      return { rounds }
    } finally {
      await sbx.kill()
    }
  },

  async uploads() {
    // envd 0.5.7: gzip and streamed bodies go as octet-stream uploads
    const sbx = await Sandbox.create({ timeoutMs: 120_000 })
    try {
      const text = 'zipped '.repeat(2000)
      const gz = await sbx.files.write('gz.txt', text, { gzip: true })
      const gzBack = await sbx.files.read('gz.txt')
      const enc = new TextEncoder()
      const stream = new ReadableStream({ start(c) { c.enqueue(enc.encode('part1 ')); c.enqueue(enc.encode('part2')); c.close() } })
      const st = await sbx.files.write('/tmp/streamed.txt', stream)
      const stBack = await sbx.files.read('/tmp/streamed.txt')
      const owner = await sbx.commands.run('stat -c %U gz.txt')
      const gzRead = await sbx.files.read('gz.txt', { gzip: true })
      // envd 0.6.2: metadata on writes, kept with the file, shown in its entries
      const meta = { owner: 'agent', 'run-id': '7' }
      const m = await sbx.files.write('m.txt', 'with metadata', { metadata: meta })
      const many = await sbx.files.write([{ path: 'm1.txt', data: 'a' }, { path: 'm2.txt', data: 'b' }], { metadata: { batch: 'yes' } })
      const info = await sbx.files.getInfo('m.txt')
      const plain = await sbx.files.getInfo('gz.txt')
      const listed = (await sbx.files.list('.')).filter((e) => e.name.startsWith('m')).map((e) => [e.name, e.metadata ?? null])
      const gzMeta = await sbx.files.write('mgz.txt', 'z', { gzip: true, metadata: { z: '1' } })
      const badMeta = await catching(() => sbx.files.write('bad.txt', 'x', { metadata: { 'bad key': 'v' } }))
      // a write replaces a file's metadata: without any, the old is gone
      await sbx.files.write('m1.txt', 'again', { metadata: { other: 'x' } })
      await sbx.files.write('m2.txt', 'again')
      const rewritten = [(await sbx.files.getInfo('m1.txt')).metadata ?? null, (await sbx.files.getInfo('m2.txt')).metadata ?? null]
      return { gz, gzOk: gzBack === text, st, stBack, owner: owner.stdout, gzReadOk: gzRead === text,
        m, many, infoMeta: info.metadata ?? null, plainMeta: plain.metadata ?? null, listed, gzMeta, badMeta, rewritten }
    } finally {
      await sbx.kill()
    }
  },

  async sudo() {
    // E2B's default user has passwordless sudo: `sudo apt-get ...` and the like
    const sbx = await Sandbox.create({ timeoutMs: 120_000 })
    try {
      const r = await sbx.commands.run('whoami; sudo whoami; sudo -n true && echo nopasswd; ' +
        'sudo mkdir /opt/by-sudo && stat -c %U /opt/by-sudo; sudo apt-get --version | head -c 4')
      const again = await sbx.commands.run('sudo id -u')
      return { id: sbx.sandboxId, out: r.stdout, err: r.stderr, again: again.stdout }
    } finally {
      await sbx.kill()
    }
  },

  async metrics() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000 })
    try {
      await sbx.commands.run('head -c 2000000 /dev/urandom > ~/blob && sync')
      const idle = (await sbx.getMetrics()).at(-1)
      // one vCPU busy for a second: a share of the sandbox's cpus, measured since the last sample
      await sbx.commands.run('timeout 1 bash -c "while :; do :; done" || true')
      const busy = (await sbx.getMetrics()).at(-1)
      const past = await sbx.getMetrics({ start: new Date(Date.now() - 7200_000), end: new Date(Date.now() - 3600_000) })
      return { idle, busy, past: past.length }
    } finally {
      await sbx.kill()
    }
  },

  async badargs() {
    const sbx = await Sandbox.create({ timeoutMs: 120_000 })
    const badCwd = await catching(() => sbx.commands.run('pwd', { cwd: '/no/such/dir' }))
    const badUser = await catching(() => sbx.commands.run('pwd', { user: 'nobody-here' }))
    const listFile = await catching(() => sbx.files.list('/etc/hostname'))
    const readDir = await catching(() => sbx.files.read('/etc'))
    const watchFile = await catching(() => sbx.files.watchDir('/etc/hostname', () => {}))
    const watchProc = await catching(() => sbx.files.watchDir('/proc', () => {}))
    const badEnv = await catching(() => sbx.commands.run('true', { envs: { 'BAD=NAME': 'x' } }))
    const badTimeout = await catching(() => Sandbox.create({ timeoutMs: 10 * 24 * 3600 * 1000 }))
    await sbx.kill()
    const afterKill = await catching(() => sbx.commands.run('true'))
    const afterKillFiles = await catching(() => sbx.files.read('/etc/hostname'))
    const afterKillRunning = await sbx.isRunning()
    return { badCwd, badUser, listFile, readDir, watchFile, watchProc, badEnv, badTimeout, afterKill,
      afterKillFiles, afterKillRunning }
  },

  async errors() {
    const bad = await catching(() => Sandbox.connect('no-such-sandbox'))
    const badInfo = await catching(() => Sandbox.getInfo('no-such-sandbox'))
    const badKill = await Sandbox.kill('no-such-sandbox')
    const badTemplate = await catching(() => Sandbox.create('no-such-template'))
    const wrongKey = await catching(() => Sandbox.list({ apiKey: 'wrong' }).nextItems())
    return { bad, badInfo, badKill, badTemplate, wrongKey }
  },
}

const name = process.argv[2]
if (!cases[name]) {
  console.error(`unknown case ${name}; one of ${Object.keys(cases).join(', ')}`)
  process.exit(2)
}
const result = await cases[name]()
console.log('RESULT ' + JSON.stringify(result))
