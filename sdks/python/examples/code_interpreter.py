"""An agent's code-interpreter loop: the model writes code, the sandbox runs it, and the
output, rich results and errors go back to the model as the next observation.

The "model" here is a scripted list of steps, one of which fails and is then corrected, so
the example runs without an LLM; replace ``next_code`` with a call to yours.
Run: HYBOX_DOMAIN=... HYBOX_API_KEY=... python code_interpreter.py
"""

from __future__ import annotations

import hybox

STEPS = [
    "data = [3, 1, 4, 1, 5, 9, 2, 6]\nsum(data) / len(data)",
    "import statistics\nstatistics.median(dta)",  # a typo the agent will see and fix
    "import statistics\nstatistics.median(data)",
    (
        "class Table:\n"
        "    def __init__(self, rows): self.rows = rows\n"
        "    def _repr_html_(self):\n"
        "        cells = ''.join(f'<tr><td>{r}</td></tr>' for r in self.rows)\n"
        "        return f'<table>{cells}</table>'\n"
        "display(Table(sorted(data)))\n"
        "print('done')"
    ),
]


def next_code(history: list[str]) -> str | None:
    """Stands in for the model: the next cell to run, given the observations so far."""
    step = len(history)
    return STEPS[step] if step < len(STEPS) else None


def observe(execution: hybox.Execution) -> str:
    """What the model is told about an execution."""
    parts = []
    if execution.stdout:
        parts.append("stdout: " + execution.stdout.strip())
    for result in execution.results:
        parts.append(f"result ({', '.join(result.formats())}): {result.text}")
    if execution.error:
        parts.append(f"error: {execution.error.name}: {execution.error.value}")
    return "; ".join(parts) or "(nothing)"


def main() -> None:
    history: list[str] = []
    with hybox.Sandbox.create() as sandbox:
        context = sandbox.code.create_context("python")
        while (code := next_code(history)) is not None:
            execution = sandbox.code.run(
                code,
                context=context,
                timeout=30,
                on_result=lambda r: print("  live result:", r.formats()),
            )
            history.append(observe(execution))
            print(f"step {len(history)}: {history[-1]}")


if __name__ == "__main__":
    main()
