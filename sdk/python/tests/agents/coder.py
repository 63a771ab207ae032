"""The coding agent of the E2B document, with the cloud parts replaced by local stand-ins:
the "sandbox" is a folder found (or made) per session through step(), the conversation is
loaded and saved through step(), the model loop is ChatClient.run_tools instead of a
LangGraph graph, and pausing the sandbox is a line in paused.log."""

import asyncio
import json

from _common import WORK, effect, note, run

from rebuno import Blocked, ChatClient, execution, step, tool

llm = ChatClient()
sandbox_dir = WORK  # set by the handler (the document's `sandbox` global)


async def find_sandbox(session: str) -> str:
    d = WORK / "sandboxes" / session
    d.mkdir(parents=True, exist_ok=True)
    effect("find_sandbox")
    return str(d)


def load_conversation(session: str) -> list:
    path = WORK / "sessions" / f"{session}.json"
    return json.loads(path.read_text()) if path.exists() else []


def save_conversation(session: str, messages: list) -> bool:
    path = WORK / "sessions" / f"{session}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(messages))
    return True


@tool("shell")
async def shell(command: str) -> str:
    """Run a shell command in the repository and return its exit code and output."""
    effect("shell")
    proc = await asyncio.create_subprocess_shell(command, cwd=sandbox_dir, stdout=asyncio.subprocess.PIPE,
                                                 stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    return f"exit code {proc.returncode}\n{out.decode()}"[-10000:]


@tool("read_file")
async def read_file(path: str) -> str:
    """Return a file's contents. The path is relative to the repository root."""
    p = f"{sandbox_dir}/{path}"
    try:
        with open(p) as f:
            return f.read()
    except FileNotFoundError:
        return f"{path} does not exist"


@tool("write_file")
async def write_file(path: str, content: str) -> str:
    """Replace a file's contents, creating it if needed. The path is relative to the repository root."""
    effect("write_file")
    with open(f"{sandbox_dir}/{path}", "w") as f:
        f.write(content)
    return f"wrote {path}"


@tool("open_pr", idempotency="at_most_once")
async def open_pr(title: str, body: str) -> str:
    """Open a pull request from the pushed branch."""
    effect("open_pr")
    return "https://git.local/pulls/1"


async def process(task: str, session: str | None = None) -> dict:
    global sandbox_dir
    session = session or execution().id[-12:]
    sandbox_dir = await step("find_sandbox", find_sandbox, {"session": session})
    history = await step("load_conversation", load_conversation, {"session": session})
    result = None
    try:
        result = await llm.run_tools([*history, {"role": "user", "content": task}],
                                     [shell, read_file, write_file, open_pr])
    finally:
        if result is not None or isinstance(execution().suspension, Blocked):
            note("paused.log", f"{execution().dispatch_id} {type(execution().suspension).__name__}")
    await step("save_conversation", save_conversation, {"session": session, "messages": result})
    return {"answer": result[-1]["content"], "session": session}


if __name__ == "__main__":
    run("e2b", process)
