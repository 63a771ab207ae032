"""kill -9 of the kernel between acknowledged writes loses none of them."""
import random
import threading
import time

from conftest import Dispatch


def hammer(k, stop, acked, errors, agent_n):
    """One simulated agent: create, claim, submit and complete steps; remember every 2xx."""
    agent = f"a{agent_n}"
    try:
        w = k.worker(agent)
        while not stop.is_set():
            ex = k.create(agent, {"n": agent_n})
            acked["execs"].add(ex["id"])
            d = Dispatch(k, k.claim(agent, w))
            # The claim may hand over an older execution of this agent, even one whose
            # create committed but whose reply the kill cut off.
            acked["execs"].add(d.exec_id)
            for i in range(5):
                dec = d.submit("tool", {"i": i})
                acked["proceeds"].add(dec["step_id"])
                out = d.finish(dec["step_id"], result={"i": i})
                assert out["decision"] == "recorded"
                acked["results"][dec["step_id"]] = {"i": i}
            st, _ = d.complete({"done": True})
            if st == 200:
                acked["completed"].add(d.exec_id)
    except (OSError, AssertionError, TypeError, KeyError) as e:  # the kernel was killed under us
        errors.append(repr(e))


def test_kill9_loses_no_acknowledged_write(make_kernel):
    k = make_kernel().start()
    acked = {"execs": set(), "proceeds": set(), "results": {}, "completed": set()}
    rng = random.Random(7)
    for round_ in range(4):
        stop = threading.Event()
        errors = []
        threads = [threading.Thread(target=hammer, args=(k, stop, acked, errors, i)) for i in range(8)]
        for t in threads:
            t.start()
        time.sleep(0.3 + rng.random() * 0.7)
        k.kill9()
        stop.set()
        for t in threads:
            t.join(10)
        k.start()  # same state folder, new process
    assert len(acked["execs"]) > 20, "the load did not run long enough to test anything"
    for ex_id in acked["execs"]:
        got = k.ok("GET", f"/v0/executions/{ex_id}")
        seqs = [e["event_seq"] for e in k.events(ex_id)]
        assert seqs == list(range(1, len(seqs) + 1)), f"gap in {ex_id}: {seqs}"
        if ex_id in acked["completed"]:
            assert got["status"] == "completed" and got["output"] == {"done": True}
    steps = {}
    for ex_id in acked["execs"]:
        for s in k.ok("GET", f"/v0/executions/{ex_id}/steps"):
            steps[s["step_id"]] = s
    for step_id in acked["proceeds"]:
        assert step_id in steps, f"acknowledged step {step_id} was lost"
    for step_id, result in acked["results"].items():
        assert steps[step_id]["status"] == "succeeded" and steps[step_id]["result"] == result
