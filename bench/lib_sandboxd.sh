# bench/lib_sandboxd.sh - sourced by the compat benches (bench/e2b_compat.sh,
# bench/vercel_compat.sh): one sandboxd on a tmpfs with an extra endpoint, stopped and
# cleaned up on exit.
#
#   sandboxd_start --e2b-listen     starts build/rebuno sandboxd --listen 127.0.0.1:$p1
#                                   <FLAG> 127.0.0.1:$p2, state in $tmp/state (a tmpfs, see
#                                   bench/run.sh for why), log in $tmp/log; waits for the
#                                   local token and exports REBUNO_SANDBOX_TOKEN_FILE,
#                                   REBUNO_SANDBOX_TOKEN and REBUNO_SANDBOX_URL; sets p1, p2,
#                                   pid, tmp and an EXIT trap that stops it all.

tmp= pid=
sandboxd_cleanup() {
    [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    [[ -n $tmp ]] || return 0
    umount -l "$tmp" 2>/dev/null; rmdir "$tmp" 2>/dev/null || true
}
sandboxd_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
sandboxd_start() {
    local flag=$1
    tmp=$(mktemp -d)
    trap sandboxd_cleanup EXIT
    mount -t tmpfs -o size=2g tmpfs "$tmp"
    p1=$(sandboxd_port) p2=$(sandboxd_port)
    build/rebuno sandboxd --listen "127.0.0.1:$p1" "$flag" "127.0.0.1:$p2" \
        --state-dir "$tmp/state" --log-level warn >"$tmp/log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do [[ -s $tmp/state/local-token ]] && break; sleep 0.05; done
    export REBUNO_SANDBOX_TOKEN_FILE=$tmp/state/local-token
    REBUNO_SANDBOX_TOKEN=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$REBUNO_SANDBOX_TOKEN_FILE")
    export REBUNO_SANDBOX_TOKEN REBUNO_SANDBOX_URL=http://127.0.0.1:$p1
}
