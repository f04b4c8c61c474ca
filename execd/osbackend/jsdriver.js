// hybox persistent-context driver for node (run as `node -e <this file>`).
// It speaks the framing of internal/pydriver/driver.py:
//   requests on fd 0: "<kind> <decimal byte length>\n<payload>" (init, exec)
//   replies on fd 1: MAGIC + one line of JSON + "\n" (ready, result, error,
//   done); every other byte on fd 1 is the cell's stdout, fd 2 its stderr.
// Cells run with vm.runInContext in one context, so declarations persist;
// a cell's promise result is awaited. SIGINT stops a running cell (the
// state survives) and is ignored between cells.
'use strict';
const vm = require('vm');
const util = require('util');
const fs = require('fs');

const MAGIC = '\x00\x1bHYBOX\x1d';

function writeAll(fd, s) {
  let buf = Buffer.from(s, 'utf8');
  while (buf.length > 0) {
    try {
      const n = fs.writeSync(fd, buf);
      buf = buf.subarray(n);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
    }
  }
}

function frame(obj) {
  writeAll(1, MAGIC + JSON.stringify(obj) + '\n');
}

const print = (fd) => (...args) => writeAll(fd, util.format(...args) + '\n');
const cellConsole = {
  log: print(1), info: print(1), debug: print(1), trace: print(2),
  error: print(2), warn: print(2),
  dir: (o) => writeAll(1, util.inspect(o) + '\n'),
  table: print(1),
};

const sandbox = {
  console: cellConsole, require, process, Buffer, URL, URLSearchParams,
  TextEncoder, TextDecoder, setTimeout, clearTimeout, setInterval,
  clearInterval, setImmediate, clearImmediate, queueMicrotask,
  structuredClone, fetch: globalThis.fetch, module: { exports: {} },
};
sandbox.global = sandbox;
sandbox.globalThis = sandbox;
const context = vm.createContext(sandbox);

function display(value) {
  if (value === undefined) return;
  const data = { 'text/plain': typeof value === 'string' ? value : util.inspect(value) };
  frame({ type: 'result', data });
}

function reportError(e) {
  let ename = 'Error', evalue = String(e), traceback = [];
  if (e && typeof e === 'object') {
    ename = e.name || (e.constructor && e.constructor.name) || 'Error';
    evalue = e.message !== undefined ? String(e.message) : String(e);
    traceback = String(e.stack || ename + ': ' + evalue).split('\n');
  }
  frame({ type: 'error', ename, evalue, traceback });
}

let count = 0;
async function run(code) {
  count++;
  try {
    let value = vm.runInContext(code, context, { filename: '<cell-' + count + '>', breakOnSigint: true });
    if (value && typeof value.then === 'function') value = await value;
    display(value);
  } catch (e) {
    reportError(e);
  }
}

process.on('SIGINT', () => {}); // only a running cell is interrupted

let buf = Buffer.alloc(0);
let queue = Promise.resolve();
function parse() {
  for (;;) {
    const nl = buf.indexOf(10);
    if (nl < 0) return;
    const head = buf.subarray(0, nl).toString('latin1');
    const sp = head.indexOf(' ');
    const kind = head.slice(0, sp);
    const size = parseInt(head.slice(sp + 1), 10);
    if (buf.length < nl + 1 + size) return;
    const payload = buf.subarray(nl + 1, nl + 1 + size).toString('utf8');
    buf = buf.subarray(nl + 1 + size);
    if (kind === 'exec') {
      queue = queue.then(() => run(payload)).then(() => frame({ type: 'done' }));
    } else if (kind === 'init') {
      const req = JSON.parse(payload);
      for (const [k, v] of Object.entries(req.env || {})) process.env[k] = v;
      if (req.cwd) { try { process.chdir(req.cwd); } catch (e) { writeAll(2, 'hybox: ' + e.message + '\n'); } }
    }
  }
}
process.stdin.on('data', (chunk) => { buf = Buffer.concat([buf, chunk]); parse(); });
process.stdin.on('end', () => process.exit(0));
frame({ type: 'ready' });
