// The loop of a code-interpreter agent: cells (here a fixed list; in an
// agent, what the model writes) run one after the other in one Python
// context, and what each did (output, rich results, errors) is what the
// agent would show the model next.
import { Sandbox } from "@hybox/sdk";

const cells = [
  "import math\nradius = 3\nprint('radius', radius)",
  "area = math.pi * radius ** 2\nround(area, 2)",
  "class Table:\n    def _repr_html_(self):\n        return '<table><tr><td>area</td></tr></table>'\nTable()",
  "undefined_name + 1",
  "round(area / radius, 2)",
];

const sandbox = await Sandbox.create();
try {
  const context = await sandbox.code.createContext({ language: "python" });
  for (const [i, cell] of cells.entries()) {
    const x = await sandbox.code.run(cell, { context, timeoutMs: 30_000 });
    console.log(`[${i + 1}] execution ${x.executionCount}`);
    for (const line of x.logs.stdout.join("").split("\n").filter(Boolean)) console.log("  stdout:", line);
    for (const r of x.results) console.log("  result:", r.formats().join(", "), "=>", r.text);
    if (x.error) console.log(`  error: ${x.error.name}: ${x.error.value}`);
  }
} finally {
  await sandbox.kill();
}
