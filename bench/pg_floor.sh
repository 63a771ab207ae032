#!/bin/bash
# bench/pg_floor.sh - what PostgreSQL itself needs per durable write on this machine, beside
# what the kernel's store spends (bench/README.md, "Is 3x the naive loop reachable here?").
#
# Starts a PostgreSQL like bench/kernel's (initdb + pg_ctl in a temporary folder, fsync on,
# as nobody when run as root; stopped and removed on every exit path) and runs with
# pgbench, one client, prepared statements:
#   naive  one autocommit INSERT of an event-sized row per transaction (bench/kernel's loop)
#   floor  the rows of 32 step round trips in one durable transaction with one statement
#          per table and purpose: lock and read the 32 executions with their last seq, read
#          32 counters and 32 steps, insert 32 steps, upsert 32 counters, insert 128 events,
#          update the 32 steps (the least SQL the kernel's writes can be)
# and prints transactions/s and the server's CPU per transaction and per round trip (utime +
# stime of its processes, plus the postmaster's cutime + cstime for the exited backends).
# The tables are the store's (src/store/store_pg.c, schema 4), reduced to what is touched.
#
#   bench/pg_floor.sh [SECONDS] [RUNS]      default 4 s, 3 runs of each
set -euo pipefail
secs=${1:-4}
runs=${2:-3}
bindir=$(printf "%s\n" /usr/lib/postgresql/*/bin | sort -V | tail -1)
[ -x "$bindir/initdb" ] || { echo "pg_floor: PostgreSQL is not installed (scripts/deps.sh)" >&2; exit 1; }
command -v pgbench >/dev/null || { echo "pg_floor: pgbench is not installed (postgresql-client)" >&2; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/var/tmp}/rebuno-pg-floor-XXXXXX")
as=()
if [ "$(id -u)" = 0 ]; then chown nobody "$dir"; as=(runuser -u nobody --); fi
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cleanup() {
  "${as[@]}" "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"${as[@]}" "$bindir/initdb" -D "$dir/data" -U rebuno -E UTF8 --locale=C.UTF-8 -A trust >/dev/null
"${as[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/pg.log" -w -t 60 \
  -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=100" start >/dev/null
sql() { psql -qX -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U rebuno postgres "$@"; }
sql <<'EOF'
CREATE TABLE naive(id BIGSERIAL PRIMARY KEY, payload TEXT NOT NULL);
CREATE TABLE executions(id TEXT COLLATE "C" PRIMARY KEY, agent TEXT NOT NULL, status TEXT NOT NULL,
  dstate TEXT NOT NULL, lease_deadline BIGINT NOT NULL);
CREATE TABLE events(execution_id TEXT COLLATE "C" NOT NULL, seq BIGINT NOT NULL, type TEXT NOT NULL,
  payload TEXT NOT NULL, at BIGINT NOT NULL, PRIMARY KEY(execution_id, seq));
CREATE TABLE steps(ord BIGSERIAL NOT NULL, step_id TEXT COLLATE "C" NOT NULL,
  execution_id TEXT COLLATE "C" NOT NULL, kind TEXT NOT NULL, target TEXT NOT NULL,
  args_hash TEXT NOT NULL, occurrence BIGINT NOT NULL, idempotency TEXT NOT NULL, status TEXT NOT NULL,
  args TEXT NOT NULL, result TEXT, error TEXT, rule_id TEXT, approval_id TEXT NOT NULL,
  runs BIGINT NOT NULL, indeterminate INTEGER NOT NULL, created_at BIGINT NOT NULL,
  completed_at BIGINT NOT NULL, resources TEXT, PRIMARY KEY(execution_id, step_id)) WITH (fillfactor = 60);
CREATE INDEX steps_indeterminate ON steps(execution_id, kind, target, args_hash) WHERE indeterminate = 1;
CREATE INDEX steps_rule ON steps(rule_id, created_at) WHERE rule_id IS NOT NULL;
CREATE TABLE step_counters(execution_id TEXT COLLATE "C" NOT NULL, kind TEXT NOT NULL,
  target TEXT NOT NULL, args_hash TEXT NOT NULL, consumed BIGINT NOT NULL, last_request TEXT,
  PRIMARY KEY(execution_id, kind, target, args_hash));
INSERT INTO executions SELECT 'e' || g, 'a', 'running', 'leased', 0 FROM generate_series(1, 32) g;
EOF
ids=$(/usr/bin/python3 -c "print(','.join(\"'e%d'\" % i for i in range(1, 33)))")
cat > "$dir/naive.sql" <<'EOF'
INSERT INTO naive(payload) VALUES (repeat('x', 260));
EOF
# :b numbers the batch; step ids, hashes and seqs derive from it (random keys, as the kernel's are)
cat > "$dir/floor.sql" <<EOF
\set b random(1, 1000000000000)
BEGIN;
SELECT id, (SELECT coalesce(max(seq), 0) FROM events WHERE execution_id = x.id) FROM executions x WHERE id = ANY(ARRAY[$ids]) ORDER BY id FOR NO KEY UPDATE;
SELECT * FROM step_counters WHERE (execution_id, kind, target, args_hash) IN (SELECT 'e'||g, 'tool_call', 'tool', md5(:b::text||g) FROM generate_series(1,32) g);
SELECT * FROM steps WHERE (execution_id, step_id) IN (SELECT 'e'||g, :b||'-'||g FROM generate_series(1,32) g);
INSERT INTO steps(step_id, execution_id, kind, target, args_hash, occurrence, idempotency, status, args, result, error, rule_id, approval_id, runs, indeterminate, created_at, completed_at, resources) SELECT :b||'-'||g, 'e'||g, 'tool_call', 'tool', md5(:b::text||g), 0, 'safe_to_retry', 'executing', '{"i":2}', NULL, NULL, 'permissive', '', 1, 0, 0, 0, NULL FROM generate_series(1,32) g;
INSERT INTO step_counters SELECT 'e'||g, 'tool_call', 'tool', md5(:b::text||g), 1, NULL FROM generate_series(1,32) g ON CONFLICT (execution_id, kind, target, args_hash) DO UPDATE SET consumed = excluded.consumed;
INSERT INTO events SELECT 'e'||(g%32+1), :b::bigint*128+g, 'step.proposed', repeat('x', 260), 0 FROM generate_series(1,128) g;
UPDATE steps SET status='succeeded', result='{"i":2}', completed_at=1 WHERE (execution_id, step_id) IN (SELECT 'e'||g, :b||'-'||g FROM generate_series(1,32) g);
COMMIT;
EOF
# some rows first, then statistics, so the plans are the index lookups of a filled table
pgbench -n -M prepared -c 1 -T 3 -f "$dir/floor.sql" -h "$dir" -p "$port" -U rebuno postgres >/dev/null 2>&1
sql -c "ANALYZE"
pm=$(head -1 "$dir/data/postmaster.pid")
ticks=$(getconf CLK_TCK)
cpu() { # server CPU so far, in ticks
  local t s
  read -ra s < "/proc/$pm/stat"
  t=$((s[13] + s[14] + s[15] + s[16]))
  for c in $(ps -o pid= --ppid "$pm"); do
    if read -ra s < "/proc/$c/stat" 2>/dev/null; then t=$((t + s[13] + s[14])); fi
  done
  echo $t
}
bench() { # NAME PER: one pgbench run; PER = round trips per transaction (0: none)
  local c0 c1 out tx tps us
  c0=$(cpu)
  out=$(pgbench -n -M prepared -c 1 -T "$secs" -f "$dir/$1.sql" -h "$dir" -p "$port" -U rebuno postgres 2>&1)
  sleep 0.5 # the backend has exited and been reaped: its CPU is in the postmaster's cutime
  c1=$(cpu)
  tx=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
  tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
  [ "${tx:-0}" -gt 0 ] || { echo "$out" | tail -3 >&2; exit 1; }
  us=$(( (c1 - c0) * 1000000 / ticks / tx ))
  if [ "$2" = 0 ]; then
    printf '%-6s %8s tx/s   server CPU %6d us per transaction (one row, one durable write)\n' "$1" "${tps%.*}" "$us"
  else
    printf '%-6s %8s tx/s   server CPU %6d us per transaction, %4d us per round trip (%d per transaction)\n' \
      "$1" "${tps%.*}" "$us" $((us / $2)) "$2"
  fi
}
echo "pg_floor: PostgreSQL from $bindir, fsync on, data in $dir; pgbench -M prepared, 1 client, ${secs} s each"
for _ in $(seq "$runs"); do bench naive 0; bench floor 32; done
