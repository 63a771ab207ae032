"""A shell agent with a policy: read-only commands run at once, the rest wait for approval.

    build/rebuno dev --config examples/python/rebuno.yaml
    PYTHONPATH=sdk/python python3 examples/python/shell_agent.py
    build/rebuno exec create shell '{"commands": ["ls", "touch notes.txt"]}'
    build/rebuno exec watch <id>            # `touch` waits: approve it
    build/rebuno exec approve <id> --by you

Input ``{"commands": [...]}`` runs the commands in order. With ``LLM_BASE_URL`` and
``LLM_MODEL`` set (any OpenAI-compatible server), ``{"task": "..."}`` lets a model decide
which commands to run instead. Commands run in ``$SHELL_WORKDIR`` (default: the folder
the agent was started in). A denied command comes back to the agent (and the model) as
``"shell not allowed. reason: ..."``.
"""

import asyncio
import os

from rebuno import Agent, ChatClient, Refusal, tool

WORKDIR = os.environ.get("SHELL_WORKDIR", os.getcwd())


@tool("shell")
async def shell(command: str) -> str:
    """Run a shell command in the work folder and return its exit code and output.

    Args:
        command: One shell command line.
    """
    proc = await asyncio.create_subprocess_shell(
        command, cwd=WORKDIR, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
    except asyncio.TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
        return f"timed out after 120s\n{out.decode(errors='replace')}"[-10000:]
    return f"exit code {proc.returncode}\n{out.decode(errors='replace')}"[-10000:]


async def process(commands: list[str] | None = None, task: str | None = None) -> dict:
    """Run ``commands`` in order, or let a model work on ``task`` with the shell tool."""
    if task:
        llm = ChatClient()
        convo = await llm.run_tools([
            {"role": "system", "content": f"You work in {WORKDIR} through the shell tool. Be brief."},
            {"role": "user", "content": task},
        ], [shell])
        return {"answer": convo[-1]["content"]}
    results = []
    for command in commands or []:
        output = await shell(command)
        results.append({"command": command, "output": output, "refused": isinstance(output, Refusal)})
    return {"results": results}


if __name__ == "__main__":
    Agent("shell").run(process)
