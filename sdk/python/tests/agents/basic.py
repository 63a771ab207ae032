"""Input binding, tool errors, denials, Result/state and execution() facts."""

from _common import effect, run

from rebuno import Result, execution, previous, step, tool


@tool
async def shout(text: str) -> str:
    """Upper-case text."""
    effect("shout")
    return text.upper()


@tool
def count_chars(text: str) -> int:
    """A synchronous tool called from async code."""
    effect("count")
    return len(text)


@tool
async def explode(text: str) -> str:
    """Always fails."""
    raise RuntimeError(f"cannot handle {text}")


@tool("forbidden", on_denied="raise")
async def forbidden() -> str:
    """Denied by the policy; raises PolicyError instead of returning a refusal."""
    return "never"


async def process(task: str, session: str | None = None) -> Result:
    session = session or execution().id[-12:]
    if task == "boom":
        await explode(task)
    if task == "deny":
        await forbidden()
    if task == "deny_step":  # a local step the policy denies: step() raises PolicyError
        await step("forbidden", lambda: effect("forbidden-step"))
    if task == "nonjson":
        return Result(output={"x": object()})
    loud = await shout(task)
    n = await count_chars(task)
    ex = execution()
    return Result(output={"loud": loud, "n": n, "session": session, "exec_session": ex.session,
                          "previous": await previous(), "agent": ex.agent, "attempt": ex.dispatch_attempt,
                          "input": ex.input, "status": ex.status, "suspension": ex.suspension},
                  state={"last": task})


if __name__ == "__main__":
    run("basic", process)
