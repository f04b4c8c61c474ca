import assert from "node:assert/strict";
import { test } from "node:test";
import { ConflictError, NotFoundError } from "@hybox/sdk";
import { newSandbox } from "./util.mjs";

test("files: write and read text, bytes and streams", async (t) => {
  const sb = await newSandbox(t);
  await sb.files.write("/data/a.txt", "héllo\n");
  assert.equal(await sb.files.read("/data/a.txt"), "héllo\n");
  const bytes = new Uint8Array(256).map((_, i) => i);
  await sb.files.write("/data/b.bin", bytes, { mode: 600 });
  assert.deepEqual(await sb.files.readBytes("/data/b.bin"), bytes);
  assert.equal((await sb.files.info("/data/b.bin")).mode, 600);

  const big = new Uint8Array(3 << 20).map((_, i) => i % 251);
  let sent = 0;
  const src = new ReadableStream({
    pull(c) {
      if (sent >= big.length) return c.close();
      c.enqueue(big.subarray(sent, sent + 65536));
      sent += 65536;
    },
  });
  await sb.files.write("/data/big.bin", src);
  const rs = await sb.files.readStream("/data/big.bin");
  let n = 0;
  let ok = true;
  for await (const chunk of rs) {
    for (let i = 0; i < chunk.length; i++) if (chunk[i] !== (n + i) % 251) ok = false;
    n += chunk.length;
  }
  assert.equal(n, big.length);
  assert.ok(ok, "streamed bytes differ");
  await sb.files.write("/data/blob.txt", new Blob(["from a blob"]));
  assert.equal(await sb.files.read("/data/blob.txt"), "from a blob");
  // the sandbox sees what the SDK wrote
  assert.equal((await sb.commands.run("cat /data/a.txt")).stdout, "héllo\n");
});

test("files: writeMany, list, exists, info, search, replace, rename, makeDir, remove", async (t) => {
  const sb = await newSandbox(t);
  await sb.files.writeMany([
    { path: "/p/one.py", data: "print(1)\n" },
    { path: "/p/two.py", data: "print(2)\n" },
    { path: "/p/sub/three.txt", data: "x = old, old\n" },
  ]);
  const names = (await sb.files.list("/p")).map((f) => f.path).sort();
  assert.deepEqual(names, ["/p/one.py", "/p/sub", "/p/two.py"]);
  const deep = (await sb.files.list("/p", { depth: 2 })).map((f) => f.path);
  assert.ok(deep.includes("/p/sub/three.txt"), deep.join());
  assert.equal(await sb.files.exists("/p/one.py"), true);
  assert.equal(await sb.files.exists("/p/none"), false);
  const info = await sb.files.info("/p/sub");
  assert.equal(info.type, "directory");
  assert.equal((await sb.files.info("/p/one.py")).size, 9);
  await assert.rejects(sb.files.info("/p/none"), NotFoundError);
  await assert.rejects(sb.files.read("/p/none"), NotFoundError);

  const found = (await sb.files.search("/p", "*.py")).map((f) => f.path).sort();
  assert.deepEqual(found, ["/p/one.py", "/p/two.py"]);
  assert.equal(await sb.files.replace("/p/sub/three.txt", "old", "new"), 2);
  assert.equal(await sb.files.read("/p/sub/three.txt"), "x = new, new\n");

  await sb.files.rename("/p/one.py", "/p/uno.py");
  assert.equal(await sb.files.exists("/p/one.py"), false);
  assert.equal(await sb.files.read("/p/uno.py"), "print(1)\n");
  await assert.rejects(sb.files.rename("/p/uno.py", "/p/two.py"), ConflictError);

  await sb.files.makeDir("/q/r/s");
  assert.equal((await sb.files.info("/q/r/s")).type, "directory");
  await sb.files.remove("/p/uno.py");
  assert.equal(await sb.files.exists("/p/uno.py"), false);
  await sb.files.remove("/q");
  assert.equal(await sb.files.exists("/q"), false);
  await sb.files.remove("/q"); // a missing path is not an error
  await sb.files.setPermissions("/p/two.py", { mode: 755 });
  assert.equal((await sb.files.info("/p/two.py")).mode, 755);
});
