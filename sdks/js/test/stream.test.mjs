// The stream parser, on bodies cut at every byte: plain events (as hybox
// sends them), `data:`-prefixed events, CRLF, comments, a last event without
// its blank line.
import assert from "node:assert/strict";
import { test } from "node:test";
import { parseEvents } from "@hybox/sdk";

function body(text, cut) {
  const bytes = new TextEncoder().encode(text);
  let i = 0;
  return new ReadableStream({
    pull(c) {
      if (i >= bytes.length) return c.close();
      c.enqueue(bytes.subarray(i, i + cut));
      i += cut;
    },
  });
}

const cases = [
  { name: "plain", text: '{"type":"init","text":"x","timestamp":1}\n\n{"type":"stdout","text":"é ü","timestamp":2}\n\n' },
  { name: "data: prefixed", text: 'data: {"type":"init","text":"x","timestamp":1}\n\ndata:{"type":"stdout","text":"é ü","timestamp":2}\n\n' },
  { name: "CRLF and comments", text: ': keep-alive\r\n\r\n{"type":"init","text":"x","timestamp":1}\r\n\r\nevent: message\r\ndata: {"type":"stdout","text":"é ü","timestamp":2}\r\n\r\n' },
  { name: "no final blank line", text: '{"type":"init","text":"x","timestamp":1}\n\n{"type":"stdout","text":"é ü","timestamp":2}' },
];

test("parseEvents", async (t) => {
  for (const c of cases) {
    await t.test(c.name, async () => {
      for (const cut of [1, 2, 3, 7, 1000]) {
        const got = [];
        for await (const ev of parseEvents(body(c.text, cut))) got.push(ev);
        assert.deepEqual(got, [
          { type: "init", text: "x", timestamp: 1 },
          { type: "stdout", text: "é ü", timestamp: 2 },
        ], `cut every ${cut} bytes`);
      }
    });
  }
  await t.test("malformed", async () => {
    await assert.rejects(async () => {
      for await (const _ of parseEvents(body("{not json}\n\n", 4))) void _;
    }, { name: "HyboxError" });
  });
});
