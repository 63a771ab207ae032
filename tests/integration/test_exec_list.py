"""The executions list for the dashboard: counts per status, the time filter, the live list
over SSE (GET /v0/executions/stream) and an execution's forks, at the HTTP level."""
import http.client
import json
import queue
import threading
import time

from conftest import Dispatch, local_auth


def iso(ms):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def ms_of(ts):
    t, frac = ts.rstrip("Z").split(".")
    return int(time.mktime(time.strptime(t, "%Y-%m-%dT%H:%M:%S")) - time.timezone) * 1000 + int(frac[:3])


def test_counts_and_time_filter(kernel):
    early = [kernel.create("alpha", {"i": i}) for i in range(3)] + [kernel.create("beta", {})]
    time.sleep(0.05)
    late = [kernel.create("alpha", {"i": 9}), kernel.create("beta", {}, session="s1")]
    kernel.ok("POST", f"/v0/executions/{early[0]['id']}/cancel", {"reason": "test"})
    kernel.ok("POST", f"/v0/executions/{late[1]['id']}/cancel", {})

    c = kernel.ok("GET", "/v0/executions/counts")
    assert c == {"counts": {"pending": 4, "running": 0, "blocked": 0, "completed": 0, "failed": 0,
                            "cancelled": 2}, "total": 6}, c
    c = kernel.ok("GET", "/v0/executions/counts?agent_id=alpha")
    assert c["counts"]["pending"] == 3 and c["counts"]["cancelled"] == 1 and c["total"] == 4
    assert kernel.ok("GET", "/v0/executions/counts?session=s1")["counts"]["cancelled"] == 1

    # created_after is inclusive, created_before exclusive, both on created_at
    cut = ms_of(late[0]["created_at"])
    assert cut > ms_of(early[-1]["created_at"])
    page = kernel.ok("GET", f"/v0/executions?created_after={iso(cut)}")
    assert [x["id"] for x in page["executions"]] == [late[1]["id"], late[0]["id"]]
    page = kernel.ok("GET", f"/v0/executions?created_before={iso(cut)}&agent_id=alpha")
    assert [x["id"] for x in page["executions"]] == [e["id"] for e in reversed(early[:3])]
    page = kernel.ok("GET", f"/v0/executions?created_before={iso(cut)}&status=cancelled")
    assert [x["id"] for x in page["executions"]] == [early[0]["id"]]
    c = kernel.ok("GET", f"/v0/executions/counts?created_after={iso(cut)}")
    assert c["total"] == 2 and c["counts"]["pending"] == 1 and c["counts"]["cancelled"] == 1
    first = ms_of(early[0]["created_at"])
    c = kernel.ok("GET", f"/v0/executions/counts?created_after={iso(first)}&created_before={iso(cut)}")
    assert c["total"] == 4
    # paging still works inside a time range
    p1 = kernel.ok("GET", f"/v0/executions?created_before={iso(cut)}&limit=2")
    p2 = kernel.ok("GET", f"/v0/executions?created_before={iso(cut)}&limit=2&cursor={p1['next_cursor']}")
    assert [x["id"] for x in p1["executions"] + p2["executions"]] == [e["id"] for e in reversed(early)]

    for q, field in (("created_after=yesterday", "created_after"), ("created_before=2026-13-01T00:00:00Z",
                     "created_before"), ("status=failed", "status"), ("agent_id=bad%20name", "agent_id")):
        st, out = kernel.request("GET", f"/v0/executions/counts?{q}")
        assert st == 400 and out["details"]["field"] == field, (q, out)


class Sse:
    """An open SSE stream read by a thread; frames land in a queue."""

    def __init__(self, port, path):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.conn.request("GET", path, headers={**local_auth(port), "Accept-Encoding": "gzip"})
        self.resp = self.conn.getresponse()
        self.frames = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        cur = {}
        try:
            for raw in self.resp.fp:
                line = raw.decode().rstrip("\n")
                if line == "":
                    if "data" in cur:
                        self.frames.put((cur.get("event"), json.loads(cur["data"])))
                    cur = {}
                elif not line.startswith(":"):
                    k, _, v = line.partition(": ")
                    cur[k] = v
        except (OSError, ValueError):
            pass
        self.frames.put(None)

    def next(self, timeout=10):
        f = self.frames.get(timeout=timeout)
        assert f is not None, "the stream ended"
        return f

    def close(self):
        self.conn.close()


def test_list_stream_tells_new_and_changed_executions(kernel):
    every = Sse(kernel.port, "/v0/executions/stream")
    only_b = Sse(kernel.port, "/v0/executions/stream?agent_id=beta&status=pending")
    try:
        assert every.resp.status == 200 and every.resp.getheader("Content-Type").startswith("text/event-stream")
        assert every.resp.getheader("Content-Encoding") is None  # events are never held back by gzip
        assert every.next() == ("ready", {}) and only_b.next() == ("ready", {})
        a = kernel.create("alpha", {"big": "x" * 5000})
        ev, row = every.next()
        assert ev == "execution" and row["id"] == a["id"] and row["status"] == "pending", row
        assert row["agent_id"] == "alpha" and "input" not in row  # a list row, not the data
        b = kernel.create("beta", {})
        assert every.next()[1]["id"] == b["id"]
        ev, row = only_b.next()
        assert ev == "execution" and row["id"] == b["id"]  # alpha's was not for it
        kernel.ok("POST", f"/v0/executions/{a['id']}/cancel", {})
        ev, row = every.next()
        assert row["id"] == a["id"] and row["status"] == "cancelled"
        # a claim and a step change beta: the stream says so; only_b sees none (not pending)
        d = Dispatch(kernel, kernel.claim("beta", kernel.worker("beta")))
        seen = set()
        while "running" not in seen:
            ev, row = every.next()
            assert row["id"] == b["id"]
            seen.add(row["status"])
        d.complete("done")
        while every.next()[1]["status"] != "completed":
            pass
        assert only_b.frames.empty()
    finally:
        every.close()
        only_b.close()
    st, out = kernel.request("GET", "/v0/executions/stream?created_after=2026-01-01T00:00:00Z")
    assert st == 400 and out["details"]["field"] == "created_after"
    st, out = kernel.request("GET", "/v0/executions/stream?cursor=x")
    assert st == 400 and out["details"]["field"] == "cursor"


def test_forks_of_an_execution(kernel):
    ex = kernel.create("coder", {})
    d = Dispatch(kernel, kernel.claim("coder", kernel.worker("coder")))
    d.finish(d.submit("t", {"i": 1})["step_id"], result=1)
    assert d.complete("ok")[0] == 204
    assert kernel.ok("GET", f"/v0/executions/{ex['id']}/forks") == []
    f1 = kernel.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": 2}, status=201)
    f2 = kernel.ok("POST", f"/v0/executions/{ex['id']}/fork", {"at_seq": 3}, status=201)
    f11 = kernel.ok("POST", f"/v0/executions/{f1['id']}/fork", {"at_seq": 1}, status=201)
    forks = kernel.ok("GET", f"/v0/executions/{ex['id']}/forks")
    assert [(x["id"], x["forked_from"], x["fork_seq"]) for x in forks] == [
        (f2["id"], ex["id"], 3), (f1["id"], ex["id"], 2)]  # newest first
    assert [x["id"] for x in kernel.ok("GET", f"/v0/executions/{f1['id']}/forks")] == [f11["id"]]
    assert [x["id"] for x in kernel.ok("GET", f"/v0/executions/{ex['id']}/forks?limit=1")] == [f2["id"]]
    st, out = kernel.request("GET", "/v0/executions/00000000-0000-7000-8000-000000000000/forks")
    assert st == 404
