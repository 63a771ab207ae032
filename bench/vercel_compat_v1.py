"""bench/vercel_compat_v1.py - the same measurements as bench/vercel_compat.mjs through
the project's /v1 Python client (rebuno.sandbox.sync): create -> first output, and a
command's round trip. Run by bench/vercel_compat.sh; prints one JSON line of samples (ms).
    python3 bench/vercel_compat_v1.py ROUNDS CMDS"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))
from rebuno.sandbox import sync  # noqa: E402

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
cmds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
WARMUP = 100
create, rtt, cpu = [], [], []  # cpu: this process's own CPU ms per command
srv_create, srv_cmd = [], []  # sandboxd's own CPU ms per create -> first output, per command
SRV = os.environ.get("REBUNO_BENCH_SANDBOXD")  # its pid (bench/vercel_compat.sh sets it)


def server_cpu():
    """ms of CPU so far of sandboxd's threads and of its direct children's (its helpers and
    the zygote; not the sandboxes, the zygote's children), from /proc/*/task/*/schedstat
    (ns, where /proc/PID/stat counts 10 ms ticks): CPU, unlike wall time, does not move
    with the load of others on a shared machine."""
    if not SRV:
        return 0.0
    ns = 0

    def proc(p, kids):
        nonlocal ns
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            return
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/schedstat") as f:
                    ns += int(f.read().split()[0])
                if kids:
                    with open(f"/proc/{p}/task/{t}/children") as f:
                        for c in f.read().split():
                            proc(c, False)
            except OSError:
                pass

    proc(SRV, True)
    return ns / 1e6

client = sync.SyncSandboxClient()  # $REBUNO_SANDBOX_URL, $REBUNO_SANDBOX_TOKEN
try:
    # one unmeasured sandbox first, as bench/vercel_compat.mjs does, so both clients are
    # measured warm (a long-lived agent's steady state)
    sb = client.create_sandbox(destroy=False)
    for _ in range(WARMUP):
        sb.run_command("true", [])
    sb.delete()
    for _ in range(rounds):
        s0, t0 = server_cpu(), time.perf_counter()
        sb = client.create_sandbox(destroy=False)
        r = sb.run_command("echo", ["hi"], capture_output=True)
        out = r.stdout if isinstance(r.stdout, str) else r.stdout.decode()
        assert out == "hi\n", out
        create.append((time.perf_counter() - t0) * 1000)
        srv_create.append(server_cpu() - s0)
        c0, s1 = time.process_time(), server_cpu()
        for _ in range(cmds):
            t = time.perf_counter()
            sb.run_command("true", [])
            rtt.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c0) * 1000 / cmds)
        srv_cmd.append((server_cpu() - s1) / cmds)
        sb.delete()
finally:
    client.close()
print(json.dumps({"client": "rebuno.sandbox (/v1)", "create": create, "rtt": rtt, "cpu": cpu,
                  "srvCreate": srv_create, "srvCmd": srv_cmd}))
