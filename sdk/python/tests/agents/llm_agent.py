"""Model-loop agent: the scripted model asks for `deploy` (which needs approval), then
answers. Model calls are llm_call steps, so the re-dispatch after the approval replays
the first one instead of calling the model again."""

from _common import effect, run

from rebuno import ChatClient, tool

llm = ChatClient()  # $LLM_BASE_URL, $LLM_MODEL


@tool("deploy")
async def deploy(env: str) -> str:
    """Deploy the service.

    Args:
        env: Where to deploy (prod or staging).
    """
    effect("deploy")
    return f"deployed to {env}"


async def process(task: str, stream: bool = False) -> dict:
    deltas: list[str] = []
    convo = await llm.run_tools([{"role": "user", "content": task}], [deploy], stream=stream,
                                on_delta=deltas.append if stream else None)
    return {"answer": convo[-1]["content"], "messages": len(convo), "streamed_deltas": len(deltas)}


if __name__ == "__main__":
    run("llm", process)
