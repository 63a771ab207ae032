#!/usr/bin/env bash
# tests/compat/e2b/run-official.sh - E2B's own js-sdk tests against sandboxd's E2B-compatible
# endpoint: a conformance measure, not part of the suite (it needs a clone of e2b-dev/E2B,
# which CI does not have). It extracts packages/js-sdk at a tag, installs its runtime
# dependencies and vitest from npm, and runs tests/sandbox and tests/api with the endpoint
# as E2B_API_URL = E2B_SANDBOX_URL and e2b_<sandboxd's local token> as the key.
#
#   E2B_REPO=/path/to/E2B(.git) [E2B_REF=e2b@2.45.0] ENDPOINT=http://127.0.0.1:8091 \
#   TOKEN_FILE=.rebuno/sandboxes/local-token bash tests/compat/e2b/run-official.sh [vitest args]
#
# Then (SDK_ONLY=0 skips it) the files that test the SDK alone against mocks of E2B's own
# hosts run once more without the endpoint variables, reported apart.
#
# Tests that need what cannot exist here fail by design: public hosts per port (host, urls,
# network, internetAccess: the internet), and request-shape tests whose mocks answer for
# E2B's own host only. docs/e2b.md has the last run's figures and the reasons.
set -euo pipefail
: "${E2B_REPO:?set E2B_REPO to a clone (or bare mirror) of github.com/e2b-dev/E2B}"
: "${ENDPOINT:?set ENDPOINT to the E2B-compatible endpoint, e.g. http://127.0.0.1:8091}"
: "${TOKEN_FILE:?set TOKEN_FILE to the local-token file of sandboxd}"
ref=${E2B_REF:-e2b@2.45.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$E2B_REPO" archive "$ref" packages/js-sdk | tar -x -C "$work"
cd "$work/packages/js-sdk"
python3 - <<'PY'
import json
p = json.load(open("package.json"))
dev = {k: v for k, v in p["devDependencies"].items() if k in ("vitest", "dotenv", "error-stack-parser-es", "msw")}
json.dump({"name": "e2b-sdk-tests", "private": True, "type": "module",
           "dependencies": p["dependencies"], "devDependencies": dev}, open("package.json", "w"))
PY
cat > vitest.local.config.mts <<'CFG'
import { defineConfig } from 'vitest/config'
export default defineConfig({
  test: {
    include: ['tests/sandbox/**/*.test.ts', 'tests/api/*.test.ts'],
    isolate: true, globals: false, testTimeout: 60_000, environment: 'node',
    setupFiles: ['tests/globalFetchFallback.setup.ts'],
    deps: { interopDefault: true }, fileParallelism: false,
  },
})
CFG
npm install --no-audit --no-fund >/dev/null
key=e2b_$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$TOKEN_FILE")
rc=0
E2B_API_URL=$ENDPOINT E2B_SANDBOX_URL=$ENDPOINT E2B_E2E=1 E2B_API_KEY=$key \
  npx vitest run -c vitest.local.config.mts "$@" || rc=$?
# Files that test the SDK alone: their mocks (msw) answer for E2B's own hosts, or they
# check URLs the SDK derives from the default domain, so they fail whenever E2B_API_URL /
# E2B_SANDBOX_URL point anywhere else. Run once more without them, to show that is all.
if [ "${SDK_ONLY:-1}" = 1 ]; then
  echo "== SDK-only files, without the endpoint variables (not a measure of the endpoint) =="
  env -u E2B_API_URL -u E2B_SANDBOX_URL -u E2B_API_KEY -u E2B_DOMAIN \
    npx vitest run -c vitest.local.config.mts tests/sandbox/egressProxy.test.ts \
      tests/sandbox/iam.test.ts tests/sandbox/lifecycleRequest.test.ts \
      tests/sandbox/networkTransform.test.ts tests/sandbox/urls.test.ts || true
fi
exit "$rc"
