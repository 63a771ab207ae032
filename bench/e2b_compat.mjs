// bench/e2b_compat.mjs - the E2B-compatible endpoint through the official e2b SDK (the
// pinned one of tests/compat/e2b): create -> first command output, and a command's round
// trip. Run by bench/e2b_compat.sh; prints one JSON line of samples (ms).
//   node bench/e2b_compat.mjs ROUNDS CMDS INTERNET(0|1)
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'

const require = createRequire(new URL('../tests/compat/e2b/package.json', import.meta.url))
const { Sandbox } = await import(require.resolve('e2b'))
process.env.E2B_API_URL = process.env.E2B_SANDBOX_URL = process.env.REBUNO_E2B_COMPAT
process.env.E2B_API_KEY = JSON.parse(readFileSync(process.env.REBUNO_SANDBOX_TOKEN_FILE, 'utf8')).token
const rounds = Number(process.argv[2] ?? 5), cmds = Number(process.argv[3] ?? 20)
const internet = process.argv[4] !== '0'
const create = [], rtt = []
for (let i = 0; i < rounds; i++) {
  const t0 = performance.now()
  const sbx = await Sandbox.create({ allowInternetAccess: internet })
  const r = await sbx.commands.run('echo hi')
  if (r.stdout !== 'hi\n') throw new Error(`unexpected output ${JSON.stringify(r.stdout)}`)
  create.push(performance.now() - t0)
  for (let j = 0; j < cmds; j++) {
    const t = performance.now()
    await sbx.commands.run('true')
    rtt.push(performance.now() - t)
  }
  await sbx.kill()
}
console.log(JSON.stringify({ client: `e2b SDK (internet ${internet ? 'on' : 'off'})`, create, rtt }))
