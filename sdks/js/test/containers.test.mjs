// Code contexts in container sandboxes (runc, and runsc when the server has
// it): native CPython with Debian's matplotlib and numpy, from the plotting
// test image localhost/hybox/python-plot:3-bookworm. One sandbox per runtime.
import assert from "node:assert/strict";
import { test } from "node:test";
import { eventually, newSandbox, noContainers } from "./util.mjs";

const plotImage = "localhost/hybox/python-plot:3-bookworm";
const runtimes = [["runc", noContainers]];
runtimes.push(["runsc", noContainers || (process.env.HYBOX_TEST_RUNSC === "1" ? false : "the server has no runsc (HYBOX_SDK_RUNSC)")]);

for (const [runtime, skip] of runtimes) {
  test(`container code context (${runtime}): matplotlib figure as image/png, display() of rich objects, state kept`, { skip, timeout: 180_000 }, async (t) => {
    const sb = await newSandbox(t, { image: plotImage, extensions: { "hybox.io/runtime": runtime } });
    const ctx = await sb.code.createContext({ language: "python" });
    const setup = await sb.code.run("import matplotlib\nimport numpy as np\nxs = np.linspace(0, 1, 5)\nmatplotlib.__version__", { context: ctx });
    assert.equal(setup.error, undefined, JSON.stringify(setup.error));
    assert.match(setup.text ?? "", /^'3\./);

    const fig = await sb.code.run("import matplotlib.pyplot as plt\nplt.plot(xs, xs ** 2)\nplt.show()\nprint('after')", { context: ctx });
    assert.equal(fig.error, undefined, JSON.stringify(fig.error));
    const pngs = fig.results.filter((r) => r.png !== undefined);
    assert.equal(pngs.length, 1, JSON.stringify(fig.results.map((r) => r.formats())));
    assert.deepEqual([...Buffer.from(pngs[0].png, "base64").subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    assert.equal(fig.logs.stdout.join(""), "after\n");

    const seen = [];
    const rich = await sb.code.run(
      "class Card:\n" +
        "    def _repr_html_(self): return '<b>card</b>'\n" +
        "    def _repr_markdown_(self): return '*card*'\n" +
        "    def _repr_json_(self): return {'n': len(xs)}\n" +
        "    def __repr__(self): return 'Card()'\n" +
        "display(Card())\nprint('between')\n40 + 2",
      { context: ctx, onResult: (r) => seen.push(r.formats().sort()) },
    );
    assert.equal(rich.error, undefined, JSON.stringify(rich.error));
    assert.deepEqual(seen, [["application/json", "text/html", "text/markdown", "text/plain"], ["text/plain"]]);
    assert.equal(rich.results[0].html, "<b>card</b>");
    assert.equal(rich.results[0].markdown, "*card*");
    assert.deepEqual(rich.results[0].json, { n: 5 });
    assert.equal(rich.results[1].text, "42");
    assert.ok((await sb.code.listContexts({ language: "python" })).some((c) => c.id === ctx.id));
  });
}

test("pools and named volumes: create, claim, status, typed errors, delete", { skip: noContainers, timeout: 180_000 }, async (t) => {
  const { Pool, Volume, NotFoundError, ConflictError, InvalidArgumentError } = await import("@hybox/sdk");
  const image = "localhost/hybox/python:3-bookworm";
  const created = await Pool.create("js-pool", { image, runtime: "runc", size: 1 });
  t.after(() => Pool.delete("js-pool").catch(() => {}));
  assert.equal(created.name, "js-pool");
  assert.equal(created.source, "api");
  assert.ok(await eventually(async () => (await Pool.get("js-pool")).status.available === 1, 90_000), "the pool filled");
  assert.ok((await Pool.list()).some((p) => p.name === "js-pool"));
  const sb = await newSandbox(t, { image, entrypoint: ["sleep", "infinity"], env: { FROM: "pool" }, extensions: { "hybox.io/runtime": "runc" } });
  assert.equal((await sb.commands.run("echo $FROM")).stdout, "pool\n");
  assert.equal((await Pool.get("js-pool")).status.allocated, 1);
  assert.equal((await Pool.resize("js-pool", 0)).capacitySpec.bufferMax, 0);
  await assert.rejects(Pool.get("none"), NotFoundError);
  await assert.rejects(Pool.create("js-pool", { image }), ConflictError);
  await assert.rejects(Pool.create("other", { image: "localhost/none:1" }), InvalidArgumentError);
  await Pool.delete("js-pool");
  await assert.rejects(Pool.get("js-pool"), NotFoundError);

  const v = await Volume.create("js-vol");
  assert.equal(v.name, "js-vol");
  assert.deepEqual(v.usedBy, []);
  assert.ok((await Volume.list()).some((x) => x.name === "js-vol"));
  await assert.rejects(Volume.create("js-vol"), ConflictError);
  await Volume.delete("js-vol");
  await assert.rejects(Volume.get("js-vol"), NotFoundError);
});
