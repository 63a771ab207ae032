"""Model-loop agent that talks to the model through rebuno.http_client() (an httpx client
with RebunoTransport): the scripted model asks for `deploy` (which needs approval), then
answers. The first model request is replayed from the record after the approval."""

import json
import os

from _common import run

from rebuno import CompletionAssembler, ToolSet, http_client, tool

MODEL = os.environ["LLM_MODEL"]


@tool("deploy")
async def deploy(env: str) -> str:
    """Deploy the service.

    Args:
        env: Where to deploy (prod or staging).
    """
    return f"deployed to {env}"


TOOLS = ToolSet([deploy])


async def chat(http, messages: list, stream: bool) -> tuple[dict, dict]:
    body = {"model": MODEL, "messages": messages, "tools": TOOLS.schemas}
    if not stream:
        r = await http.post("/chat/completions", json=body)
        return r.json(), {"status": r.status_code, "type": r.headers["content-type"]}
    body["stream"] = True
    asm = CompletionAssembler()
    chunks = 0
    async with http.stream("POST", "/chat/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line[6:].strip() != "[DONE]":
                asm.add(json.loads(line[6:]))
                chunks += 1
    return asm.result(), {"status": r.status_code, "type": r.headers["content-type"], "chunks": chunks}


async def process(task: str, stream: bool = False) -> dict:
    seen = []
    async with http_client(base_url=os.environ["LLM_BASE_URL"], timeout=30) as http:
        # a model the policy denies: answered 403 with a refusal, never sent
        refused = await http.post("/chat/completions", json={"model": "banned-model", "messages": []})
        convo = [{"role": "user", "content": task}]
        while True:
            reply, meta = await chat(http, convo, stream)
            seen.append(meta)
            msg = reply["choices"][0]["message"]
            convo.append({"role": "assistant", "content": msg.get("content"),
                          **({"tool_calls": msg["tool_calls"]} if msg.get("tool_calls") else {})})
            if not msg.get("tool_calls"):
                break
            convo.extend(await TOOLS.run(msg["tool_calls"]))
    return {"answer": convo[-1]["content"], "messages": len(convo), "seen": seen,
            "refused": {"status": refused.status_code, "error": refused.json()["error"]}}


if __name__ == "__main__":
    run("llm", process)
