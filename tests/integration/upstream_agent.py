"""An agent that speaks upstream Rebuno's protocol as documented, with the standard
library only: v1 HMAC request signatures, the signed webhook it is dispatched by, and the
dispatch stream (GET /v0/agents/stream). It stands in for upstream's Python and TypeScript
SDKs, which these machines cannot install.

Signatures: Rebuno-Signature: v1=HMAC-SHA256(secret, "rebuno-request-v1\\nMETHOD\\ntarget\\n
timestamp\\ndispatch-id\\nattempt\\n" + body), with Rebuno-Agent-Id and Rebuno-Timestamp;
webhooks arrive signed sha256=HMAC-SHA256(secret, body).
"""
import hashlib
import hmac
import http.client
import http.server
import json
import queue
import threading
import time


def sign_v1(secret, method, target, ts, dispatch_id="", attempt="", body=b""):
    msg = "\n".join(["rebuno-request-v1", method, target, str(ts), dispatch_id or "", str(attempt or "")]) + "\n"
    return "v1=" + hmac.new(secret.encode(), msg.encode() + body, hashlib.sha256).hexdigest()


class Signed:
    """Signed calls of agent `agent_id` to the kernel on `port` (no Authorization header)."""

    def __init__(self, port, agent_id, secret):
        self.port, self.agent_id, self.secret = port, agent_id, secret

    def request(self, method, target, body=None, dispatch=None, ts=None, tamper=None, timeout=30):
        data = json.dumps(body).encode() if body is not None else b""
        ts = int(time.time()) if ts is None else ts
        did, att = (dispatch or ("", ""))
        h = {"Rebuno-Agent-Id": self.agent_id, "Rebuno-Timestamp": str(ts),
             "Rebuno-Signature": sign_v1(self.secret, method, target, ts, did, att, data)}
        if dispatch:
            h["Rebuno-Dispatch-Id"], h["Rebuno-Dispatch-Attempt"] = did, str(att)
        if data:
            h["Content-Type"] = "application/json"
        if tamper:
            tamper(h)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request(method, target, body=data or None, headers=h)
        r = c.getresponse()
        raw = r.read()
        c.close()
        return r.status, (json.loads(raw) if raw else None)

    def ok(self, method, target, body=None, dispatch=None, status=(200, 201, 204)):
        st, out = self.request(method, target, body, dispatch)
        assert st in status, (method, target, st, out)
        return out


class Blocked(Exception):
    """The step waits for approval: stop the handler (the kernel re-dispatches later)."""


class Stop(Exception):
    """Leave the dispatch without completing it (a simulated crash, or a superseded lease)."""


class Ctx:
    """What a handler gets: the execution and upstream's calls under the dispatch."""

    def __init__(self, agent, d, execution):
        self.agent, self.d, self.execution = agent, d, execution
        self.id = d["execution_id"]
        self.input = execution.get("input")
        self.attempt = d["dispatch_attempt"]

    def _call(self, method, rest, body=None):
        return self.agent.api.request(method, f"/v0/executions/{self.id}{rest}", body,
                                      dispatch=(self.d["dispatch_id"], self.d["dispatch_attempt"]))

    def step(self, target, args, fn, kind="tool_call", idempotency="safe_to_retry"):
        st, dec = self._call("POST", "/steps", {"kind": kind, "target": target, "args": args,
                                                 "idempotency": idempotency})
        if st == 409:
            raise Stop(dec)
        assert st == 200, (st, dec)
        self.agent.log.append((self.attempt, target, dec["decision"]))
        if dec["decision"] == "replay":
            return dec.get("result")
        if dec["decision"] == "proceed":
            result = fn()
            st, out = self._call("POST", f"/steps/{dec['step_id']}/complete", {"result": result})
            assert st == 200, (st, out)
            return result
        if dec["decision"] == "denied":
            return f"{target} not allowed. reason: {dec.get('reason', '')}"
        if dec["decision"] in ("blocked", "execution_blocked"):
            raise Blocked(dec)
        raise Stop(dec)

    def previous(self):
        return self._call("GET", "/previous")[1].get("state")


class UpstreamAgent:
    """Runs `handler(ctx)` for every dispatch it gets, in a thread per dispatch, and completes
    the execution with what it returns ({"output": ..., "state": ...} or any output)."""

    def __init__(self, port, agent_id, secret, handler):
        self.api = Signed(port, agent_id, secret)
        self.agent_id, self.secret, self.handler = agent_id, secret, handler
        self.seen = {}          # (execution_id, dispatch_id) -> highest attempt handled
        self.dispatches = []    # every dispatch body received
        self.log = []           # (attempt, target, decision) per step
        self.errors = []
        self.lock = threading.Lock()

    def dispatch(self, d):
        """Handle one dispatch (ignores a repeat of an attempt already taken, as upstream's SDK)."""
        key = (d["execution_id"], d["dispatch_id"])
        with self.lock:
            self.dispatches.append(d)
            if self.seen.get(key, 0) >= d["dispatch_attempt"]:
                return
            self.seen[key] = d["dispatch_attempt"]
        threading.Thread(target=self._run, args=(d,), daemon=True).start()

    def _run(self, d):
        try:
            st, ex = self.api.request("GET", f"/v0/executions/{d['execution_id']}")
            assert st == 200, (st, ex)
            assert all(v is not None for v in ex.values()), ex  # upstream's models refuse nulls
            ctx = Ctx(self, d, ex)
            out = self.handler(ctx)
            body = out if isinstance(out, dict) and "output" in out else {"output": out}
            st, res = ctx._call("POST", "/complete", body)
            assert st in (204, 409), (st, res)
        except (Blocked, Stop):
            pass
        except Exception as e:  # noqa: BLE001 - surfaced by the test
            self.errors.append(repr(e))


class WebhookServer:
    """Upstream's webhook endpoint: checks the sha256= body signature, acks 200 at once and
    works asynchronously. fail_first answers that many deliveries with HTTP 500."""

    def __init__(self, agent, fail_first=0):
        self.agent, self.fail_left, self.bad_signatures = agent, fail_first, 0
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                want = "sha256=" + hmac.new(outer.agent.secret.encode(), raw, hashlib.sha256).hexdigest()
                if not hmac.compare_digest(self.headers.get("Rebuno-Signature", ""), want):
                    outer.bad_signatures += 1
                    self.send_response(401)
                    self.end_headers()
                    return
                if outer.fail_left > 0:
                    outer.fail_left -= 1
                    self.send_response(500)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                outer.agent.dispatch(json.loads(raw))

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/webhook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class StreamConsumer:
    """Upstream's older SDK and its TypeScript SDK: GET /v0/agents/stream (signed), one SSE
    event per dispatch."""

    def __init__(self, agent, consumer_id="c1"):
        self.agent, self.stop, self.ready = agent, threading.Event(), threading.Event()
        self.target = f"/v0/agents/stream?agent_id={agent.agent_id}&consumer_id={consumer_id}"
        self.status, self.sock = None, None
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        self.ready.wait(10)

    def _loop(self):
        a = self.agent.api
        ts = int(time.time())
        h = {"Rebuno-Agent-Id": a.agent_id, "Rebuno-Timestamp": str(ts),
             "Rebuno-Signature": sign_v1(a.secret, "GET", self.target, ts), "Accept": "text/event-stream"}
        self.conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=60)
        self.conn.request("GET", self.target, headers=h)
        self.sock = self.conn.sock  # the response takes it over (Connection: close)
        r = self.conn.getresponse()
        self.status = r.status
        self.ready.set()
        if r.status != 200:
            return
        data = []
        while not self.stop.is_set():
            line = r.fp.readline()
            if not line:
                return
            line = line.decode().rstrip("\n")
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif line == "" and data:
                self.agent.dispatch(json.loads("\n".join(data)))
                data = []

    def close(self):
        self.stop.set()
        try:
            self.sock.shutdown(2)
        except (OSError, AttributeError):
            pass
        self.conn.close()
