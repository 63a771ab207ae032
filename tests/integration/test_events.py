"""The event log: gap-free sequences, paging and live SSE with resume."""
import http.client
import json
import threading
import time

from conftest import Dispatch, local_auth


def read_sse(port, path, last_id=None, stop_after=None, timeout=10):
    """Read SSE frames until the server ends the stream (or stop_after frames)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Last-Event-ID": str(last_id)} if last_id is not None else {}
    headers.update(local_auth(port))
    conn.request("GET", path, headers=headers)
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/event-stream")
    frames, cur = [], {}
    while True:
        line = resp.fp.readline()
        if not line:
            break
        line = line.decode().rstrip("\n")
        if line == "":
            if "data" in cur:
                frames.append(cur)
                if stop_after and len(frames) >= stop_after:
                    break
            cur = {}
        elif line.startswith(":"):
            continue
        else:
            k, _, v = line.partition(": ")
            cur[k] = cur.get(k, "") + v if k != "data" else (cur.get("data", "") + v)
    conn.close()
    return frames


def test_paging(kernel):
    ex = kernel.create("hello", {})
    d = Dispatch(kernel, kernel.claim("hello", kernel.worker("hello")))
    for i in range(10):
        d.finish(d.submit("t", {"i": i})["step_id"], result=i)
    all_events = kernel.events(ex["id"])
    page = kernel.ok("GET", f"/v0/executions/{ex['id']}/events?after_seq=5&limit=3")
    assert [e["event_seq"] for e in page] == [6, 7, 8]  # a bare array, as upstream
    assert kernel.ok("GET", f"/v0/executions/{ex['id']}")["last_seq"] == all_events[-1]["event_seq"]


def test_sse_live_and_resume(kernel):
    ex = kernel.create("hello", {})
    path = f"/v0/executions/{ex['id']}/events/stream"
    frames = {}

    def watch():
        frames["all"] = read_sse(kernel.port, path)

    t = threading.Thread(target=watch)
    t.start()
    time.sleep(0.2)
    d = Dispatch(kernel, kernel.claim("hello", kernel.worker("hello")))
    for i in range(5):
        d.finish(d.submit("t", {"i": i})["step_id"], result=i)
    d.complete("ok")
    t.join(10)
    assert not t.is_alive(), "stream did not end after the terminal event"
    seqs = [int(f["id"]) for f in frames["all"]]
    assert seqs == list(range(1, len(seqs) + 1))
    assert frames["all"][-1]["event"] == "execution.completed"
    assert json.loads(frames["all"][0]["data"])["type"] == "execution.created"
    # Resume from the middle: nothing missed, nothing repeated.
    resumed = read_sse(kernel.port, path, last_id=7)
    assert [int(f["id"]) for f in resumed] == seqs[7:]
    resumed = read_sse(kernel.port, path + "?after_seq=3")
    assert [int(f["id"]) for f in resumed] == seqs[3:]


def test_many_watchers_see_the_same_log(kernel):
    ex = kernel.create("hello", {})
    path = f"/v0/executions/{ex['id']}/events/stream"
    results = [None] * 8

    def watch(i):
        results[i] = [int(f["id"]) for f in read_sse(kernel.port, path)]

    threads = [threading.Thread(target=watch, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    d = Dispatch(kernel, kernel.claim("hello", kernel.worker("hello")))
    for i in range(20):
        d.finish(d.submit("t", {"i": i})["step_id"], result=i)
    d.complete("ok")
    for t in threads:
        t.join(10)
    final = [e["event_seq"] for e in kernel.events(ex["id"])]
    assert all(r == final for r in results), results


def test_list_filters_and_cursor_pagination(kernel):
    ids = [kernel.create("pager", {"i": i})["id"] for i in range(7)]
    kernel.create("other", {})
    seen, cursor = [], None
    while True:
        q = "agent_id=pager&limit=3" + (f"&cursor={cursor}" if cursor else "")
        page = kernel.ok("GET", f"/v0/executions?{q}")
        seen += [e["id"] for e in page["executions"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == list(reversed(ids)), "pages must be newest first, complete and without repeats"
    kernel.ok("POST", f"/v0/executions/{ids[0]}/cancel", {})
    cancelled = kernel.ok("GET", "/v0/executions?status=cancelled")["executions"]
    assert [e["id"] for e in cancelled] == [ids[0]]
