"""bench/e2b_compat_raw.py - a command's round trip on the wire, without either SDK: envd's
process.Process/Start (one Connect envelope in, the stream out, a connection per call as
the stream is close-delimited) beside /v1's POST .../commands {wait: true} (keep-alive),
the same bash -l command on the same sandbox. Shows the endpoint's own cost apart from the
e2b SDK's. Run by bench/e2b_compat.sh; prints one JSON line of samples (ms).
    python3 bench/e2b_compat_raw.py CMDS"""
import http.client
import json
import os
import struct
import sys
import time
from urllib.parse import urlparse

cmds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
e2b = urlparse(os.environ["REBUNO_E2B_COMPAT"])
v1 = urlparse(os.environ["REBUNO_SANDBOX_URL"])
tok = os.environ["REBUNO_SANDBOX_TOKEN"]

c = http.client.HTTPConnection(e2b.hostname, e2b.port)
c.request("POST", "/v2/sandboxes", body=json.dumps({"templateID": "base", "allow_internet_access": False}),
          headers={"X-API-KEY": tok, "Content-Type": "application/json"})
sb = json.loads(c.getresponse().read())
sid, access = sb["sandboxID"], sb["envdAccessToken"]
msg = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "true"]}, "stdin": False}).encode()
envelope = b"\0" + struct.pack(">I", len(msg)) + msg


def start():
    s = http.client.HTTPConnection(e2b.hostname, e2b.port)
    s.request("POST", "/process.Process/Start", body=envelope,
              headers={"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1",
                       "E2b-Sandbox-Id": sid, "X-Access-Token": access})
    body = s.getresponse().read()
    s.close()
    assert b'"end"' in body, body


k = http.client.HTTPConnection(v1.hostname, v1.port)


def command():
    k.request("POST", f"/v1/sandboxes/{sid}/commands",
              body=json.dumps({"cmd": "/bin/bash", "args": ["-l", "-c", "true"], "wait": True}),
              headers={"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
    r = k.getresponse()
    assert r.status == 200, r.read()
    r.read()


raw, raw_v1 = [], []
for _ in range(cmds):
    for f, out in ((start, raw), (command, raw_v1)):
        t = time.perf_counter()
        f()
        out.append((time.perf_counter() - t) * 1000)
c.request("DELETE", f"/sandboxes/{sid}", headers={"X-API-KEY": tok})
c.getresponse().read()
print(json.dumps({"raw": raw, "rawV1": raw_v1}))
