"""Fixtures of the E2B-document agent's end-to-end test: the coding-agent demo's stack
(examples/coding-agent/demo.py: forge, scripted model, `rebuno dev` with sandboxd, as
root) running this example's agent.py and kernel config instead of that example's."""
from __future__ import annotations

import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent
DEMO = EXAMPLE.parent / "coding-agent"
sys.path.insert(0, str(DEMO))
sys.path.insert(0, str(DEMO / "tests"))
sys.path.insert(0, str(EXAMPLE.parent.parent / "sdk" / "python"))
