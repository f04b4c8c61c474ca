// hybox prelude: node-like globals for QuickJS (console, timers, fs, fetch).
// Evaluated once per VM; the value of this script is the internal object the
// Go host calls into.
(function () {
  'use strict';
  const G = globalThis;
  const host = {
    stdout: G.__hy_stdout, stderr: G.__hy_stderr, exit: G.__hy_exit,
    stdin: G.__hy_stdin, fs: G.__hy_fs, pstate: G.__hy_pstate, presult: G.__hy_presult,
    fetch: G.__hy_fetch,
  };
  for (const k of ['__hy_stdout', '__hy_stderr', '__hy_exit', '__hy_stdin', '__hy_fs', '__hy_pstate', '__hy_presult', '__hy_fetch']) delete G[k];

  const hide = (obj, name, value) => Object.defineProperty(obj, name, { value, writable: true, configurable: true, enumerable: false });

  // ---------------------------------------------------------------- inspect
  const breakLength = 80;
  const fnToString = Function.prototype.toString;
  const objToString = Object.prototype.toString;
  const identRe = /^[A-Za-z_$][\w$]*$/;
  const typedArrayProto = Object.getPrototypeOf(Uint8Array.prototype);
  const typedArrayTag = Object.getOwnPropertyDescriptor(typedArrayProto, Symbol.toStringTag).get;

  function quote(s) {
    let q = "'";
    if (s.includes("'")) {
      if (!s.includes('"')) q = '"';
      else if (!s.includes('`') && !s.includes('${')) q = '`';
    }
    let out = '';
    for (let i = 0; i < s.length; i++) {
      const c = s[i];
      const n = s.charCodeAt(i);
      if (c === q || c === '\\') out += '\\' + c;
      else if (c === '\n') out += '\\n';
      else if (c === '\t') out += '\\t';
      else if (c === '\r') out += '\\r';
      else if (c === '\b') out += '\\b';
      else if (c === '\f') out += '\\f';
      else if (c === '\v') out += '\\v';
      else if (n < 0x20 || n === 0x7f) out += '\\x' + n.toString(16).toUpperCase().padStart(2, '0');
      else out += c;
    }
    return q + out + q;
  }

  function formatKey(k) {
    if (typeof k === 'symbol') return '[' + k.toString() + ']';
    return identRe.test(k) ? k : quote(k);
  }

  function formatNumber(n) { return Object.is(n, -0) ? '-0' : String(n); }

  function formatPrimitive(v) {
    switch (typeof v) {
      case 'string': return quote(v);
      case 'number': return formatNumber(v);
      case 'bigint': return v + 'n';
      case 'boolean': return String(v);
      case 'undefined': return 'undefined';
      case 'symbol': return v.toString();
    }
    return v === null ? 'null' : undefined;
  }

  function fnBase(f) {
    let src = '';
    try { src = fnToString.call(f); } catch (e) { /* ignore */ }
    if (src.startsWith('class') && /^class[\s{]/.test(src)) {
      return '[class ' + (f.name || '(anonymous)') + ']';
    }
    const tag = f[Symbol.toStringTag];
    let kind = 'Function';
    if (tag === 'AsyncFunction') kind = 'AsyncFunction';
    else if (tag === 'GeneratorFunction') kind = 'GeneratorFunction';
    else if (tag === 'AsyncGeneratorFunction') kind = 'AsyncGeneratorFunction';
    return '[' + kind + (f.name ? ': ' + f.name : ' (anonymous)') + ']';
  }

  function ctorName(o) {
    let p = o;
    while (p !== null) {
      const d = Object.getOwnPropertyDescriptor(p, 'constructor');
      if (d && typeof d.value === 'function' && d.value.name) return d.value.name;
      p = Object.getPrototypeOf(p);
    }
    return null;
  }

  function errorText(e) {
    let name = 'Error', message = '';
    try { name = String(e.name); } catch (x) { /* ignore */ }
    try { message = String(e.message); } catch (x) { /* ignore */ }
    let stack = '';
    try { stack = typeof e.stack === 'string' ? e.stack : ''; } catch (x) { /* ignore */ }
    const head = message ? name + ': ' + message : name;
    // Hide the prelude's own frames (host function trampolines, wrappers).
    const lines = stack.replace(/\n+$/, '').split('\n');
    stack = lines.filter((l, i) => !l.includes('hybox:prelude') && !l.includes('at __hy_') &&
      !(/^\s*at \w+ \(native\)$/.test(l) && (lines[i + 1] || '').includes('hybox:prelude'))).join('\n');
    if (stack.startsWith(head)) return stack;
    return stack ? head + '\n' + stack : head;
  }

  function isError(v) {
    return v instanceof Error || objToString.call(v) === '[object Error]';
  }

  function groupEntries(all, value, indent) {
    // Arrange many short array entries in aligned columns, like node. A
    // trailing "... more items" entry stays on its own line.
    const more = all.length && all[all.length - 1].startsWith('... ') ? all[all.length - 1] : null;
    const output = more ? all.slice(0, -1) : all;
    const n = output.length;
    let total = 0, maxLen = 0;
    for (const s of output) { total += s.length + 2; if (s.length > maxLen) maxLen = s.length; }
    const actualMax = maxLen + 2;
    if (actualMax * 3 + indent >= breakLength || !(total / actualMax > 5 || maxLen <= 6)) return all;
    const bias = Math.sqrt(actualMax - total / n);
    const biasedMax = Math.max(actualMax - 3 - bias, 1);
    const columns = Math.min(
      Math.round(Math.sqrt(2.5 * biasedMax * n) / biasedMax),
      Math.floor((breakLength - indent) / actualMax), 12, 15);
    if (columns <= 1) return all;
    const widths = [];
    for (let c = 0; c < columns; c++) {
      let w = 0;
      for (let j = c; j < n; j += columns) if (output[j].length > w) w = output[j].length;
      widths.push(w + 2);
    }
    const numeric = value !== undefined && Array.prototype.every.call(value, (x) => typeof x === 'number' || typeof x === 'bigint');
    const rows = [];
    for (let i = 0; i < n; i += columns) {
      const end = Math.min(i + columns, n);
      let line = '';
      for (let j = i; j < end - 1; j++) {
        const cell = output[j] + ', ';
        line += numeric ? cell.padStart(widths[j - i]) : cell.padEnd(widths[j - i]);
      }
      line += numeric ? output[end - 1].padStart(widths[end - 1 - i] - 2) : output[end - 1];
      rows.push(line);
    }
    if (more) rows.push(more);
    return rows;
  }

  function reduce(output, base, open, close, indent, canGroup, value) {
    if (canGroup && output.length > 6) output = groupEntries(output, value, indent);
    const prefix = base ? base + ' ' : '';
    if (output.length === 0) return prefix + open + close;
    let total = output.length + indent + open.length + base.length + 10;
    let fits = total + output.length <= breakLength;
    for (const s of output) { total += s.length; if (total > breakLength) fits = false; }
    const joined = output.join(', ');
    if (fits && !joined.includes('\n') && !base.includes('\n')) {
      return prefix + open + ' ' + joined + ' ' + close;
    }
    const ind = '\n' + ' '.repeat(indent);
    return prefix + open + ind + '  ' + output.join(',' + ind + '  ') + ind + close;
  }

  function propEntries(v, ctx, indent, skipIndices) {
    const out = [];
    const keys = Reflect.ownKeys(v);
    for (const k of keys) {
      if (skipIndices && typeof k === 'string' && /^(0|[1-9]\d*)$/.test(k)) continue;
      const d = Object.getOwnPropertyDescriptor(v, k);
      if (!d || !d.enumerable) continue;
      let s;
      if (d.get || d.set) s = d.get && d.set ? '[Getter/Setter]' : d.get ? '[Getter]' : '[Setter]';
      else s = fmt(d.value, ctx, indent + 2);
      out.push(formatKey(k) + ': ' + s);
    }
    return out;
  }

  function fmt(v, ctx, indent) {
    const prim = formatPrimitive(v);
    if (prim !== undefined) return prim;
    if (ctx.seen.includes(v)) {
      ctx.circular = true;
      return '[Circular *1]';
    }
    const depth = ctx.seen.length;
    if (typeof v === 'function') {
      const base = fnBase(v);
      const props = Object.keys(v);
      if (props.length === 0 || depth > ctx.depth) return base;
      ctx.seen.push(v);
      const out = propEntries(v, ctx, indent, false);
      ctx.seen.pop();
      return reduce(out, base, '{', '}', indent, false);
    }
    const proto = Object.getPrototypeOf(v);
    let name = ctorName(v);
    if (isError(v)) {
      const text = errorText(v);
      return indent ? text.split('\n').join('\n' + ' '.repeat(indent)) : text;
    }
    if (v instanceof Date) return isNaN(v.getTime()) ? 'Invalid Date' : v.toISOString();
    if (v instanceof RegExp) return v.toString();
    if (v instanceof Number) return '[Number: ' + formatNumber(v.valueOf()) + ']';
    if (v instanceof String) return '[String: ' + quote(v.valueOf()) + ']';
    if (v instanceof Boolean) return '[Boolean: ' + v.valueOf() + ']';
    if (typeof Symbol === 'function' && v instanceof Symbol) return '[Symbol: ' + v.valueOf().toString() + ']';
    if (v instanceof WeakMap) return 'WeakMap { <items unknown> }';
    if (v instanceof WeakSet) return 'WeakSet { <items unknown> }';
    const isArr = Array.isArray(v);
    const taTag = ArrayBuffer.isView(v) && !(v instanceof DataView) ? typedArrayTag.call(v) : undefined;
    if (depth > ctx.depth) {
      if (isArr) return '[Array]';
      return '[' + (name || (proto === null ? 'Object: null prototype' : 'Object')) + ']';
    }
    ctx.seen.push(v);
    try {
      let out = [], base = '', open = '{', close = '}', group = false;
      if (isArr || taTag) {
        const len = v.length;
        const shown = Math.min(len, 100);
        let holes = 0;
        for (let i = 0; i < shown; i++) {
          if (!isArr || Object.prototype.hasOwnProperty.call(v, i)) {
            if (holes) { out.push('<' + holes + ' empty item' + (holes > 1 ? 's' : '') + '>'); holes = 0; }
            out.push(fmt(v[i], ctx, indent + 2));
          } else holes++;
        }
        if (holes) out.push('<' + holes + ' empty item' + (holes > 1 ? 's' : '') + '>');
        if (len > shown) out.push('... ' + (len - shown) + ' more item' + (len - shown > 1 ? 's' : ''));
        if (isArr) out = out.concat(propEntries(v, ctx, indent, true));
        open = '['; close = ']'; group = true;
        if (taTag) base = taTag + '(' + len + ')';
        else if (name !== 'Array') base = (name || '[Array: null prototype]') + '(' + len + ')';
      } else if (v instanceof Map) {
        for (const [k, val] of v) out.push(fmt(k, ctx, indent + 2) + ' => ' + fmt(val, ctx, indent + 2));
        base = (name || 'Map') + '(' + v.size + ')';
        out = out.concat(propEntries(v, ctx, indent, false));
      } else if (v instanceof Set) {
        for (const val of v) out.push(fmt(val, ctx, indent + 2));
        base = (name || 'Set') + '(' + v.size + ')';
        out = out.concat(propEntries(v, ctx, indent, false));
      } else if (v instanceof ArrayBuffer) {
        const bytes = new Uint8Array(v, 0, Math.min(v.byteLength, 50));
        let hex = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join(' ');
        if (v.byteLength > 50) hex += ' ... ' + (v.byteLength - 50) + ' more bytes';
        out.push('[Uint8Contents]: <' + hex + '>', 'byteLength: ' + v.byteLength);
        base = 'ArrayBuffer';
      } else if (v instanceof Promise) {
        const st = host.pstate(v);
        if (st === 0) out.push('<pending>');
        else {
          const r = fmt(host.presult(v), ctx, indent + 2);
          out.push(st === 2 ? '<rejected> ' + r : r);
        }
        base = 'Promise';
        out = out.concat(propEntries(v, ctx, indent, false));
      } else {
        out = propEntries(v, ctx, indent, false);
        const tag = v[Symbol.toStringTag];
        if (proto === null) base = '[Object: null prototype]';
        else if (name && name !== 'Object') base = name;
        else if (!name) base = '[Object: null prototype]';
        if (typeof tag === 'string' && tag && tag !== name) base = (base || 'Object') + ' [' + tag + ']';
      }
      return reduce(out, base, open, close, indent, group, isArr || taTag ? v : undefined);
    } finally {
      ctx.seen.pop();
    }
  }

  function inspect(v, opts) {
    const ctx = { seen: [], depth: opts && opts.depth !== undefined ? (opts.depth === null ? Infinity : opts.depth) : 2, circular: false };
    let s = fmt(v, ctx, 0);
    if (ctx.circular && typeof v === 'object' && v !== null) s = '<ref *1> ' + s;
    return s;
  }

  function format(...args) {
    let out = '';
    let i = 0;
    if (typeof args[0] === 'string') {
      const f = args[0];
      i = 1;
      let last = 0;
      for (let j = 0; j < f.length - 1; j++) {
        if (f[j] !== '%') continue;
        const c = f[j + 1];
        let rep;
        if (c === '%') { out += f.slice(last, j) + '%'; last = j + 2; j++; continue; }
        if (i >= args.length) { if ('sdifjoOc'.includes(c)) { j++; } continue; }
        const a = args[i];
        switch (c) {
          case 's': rep = typeof a === 'string' ? a : typeof a === 'bigint' ? a + 'n' : (typeof a === 'object' && a !== null) ? inspect(a, { depth: 1 }) : formatPrimitive(a) ?? String(a); break;
          case 'd': case 'i': rep = typeof a === 'bigint' ? a + 'n' : (typeof a === 'object' && a !== null) ? 'NaN' : formatNumber(c === 'i' ? parseInt(a) : Number(a)); break;
          case 'f': rep = typeof a === 'symbol' ? 'NaN' : formatNumber(parseFloat(a)); break;
          case 'j': try { rep = JSON.stringify(a); } catch (e) { rep = '[Circular]'; } break;
          case 'o': case 'O': rep = inspect(a, { depth: c === 'o' ? 4 : 2 }); break;
          case 'c': rep = ''; break;
          default: continue;
        }
        out += f.slice(last, j) + rep;
        last = j + 2; j++; i++;
      }
      out += f.slice(last);
    }
    for (; i < args.length; i++) {
      const a = args[i];
      if (out.length || i > 0) out += ' ';
      out += typeof a === 'string' ? a : inspect(a);
    }
    return out;
  }

  // ---------------------------------------------------------------- console
  let groupIndent = '';
  const counts = new Map();
  const timersByLabel = new Map();
  function writeLine(err, text) {
    if (groupIndent) text = groupIndent + text.split('\n').join('\n' + groupIndent);
    (err ? host.stderr : host.stdout)(text + '\n');
  }
  const console = {
    log: (...a) => writeLine(false, format(...a)),
    info: (...a) => writeLine(false, format(...a)),
    debug: (...a) => writeLine(false, format(...a)),
    error: (...a) => writeLine(true, format(...a)),
    warn: (...a) => writeLine(true, format(...a)),
    trace: (...a) => {
      const e = new Error(format(...a));
      const stack = (e.stack || '').split('\n').slice(1).join('\n');
      writeLine(true, 'Trace: ' + e.message + (stack ? '\n' + stack.replace(/\n+$/, '') : ''));
    },
    dir: (v, o) => writeLine(false, inspect(v, o)),
    table: (...a) => writeLine(false, format(...a)),
    assert: (cond, ...a) => { if (!cond) writeLine(true, a.length ? 'Assertion failed: ' + format(...a) : 'Assertion failed'); },
    group: (...a) => { if (a.length) writeLine(false, format(...a)); groupIndent += '  '; },
    groupEnd: () => { groupIndent = groupIndent.slice(2); },
    count: (label = 'default') => { const n = (counts.get(label) || 0) + 1; counts.set(label, n); writeLine(false, label + ': ' + n); },
    countReset: (label = 'default') => { counts.delete(label); },
    time: (label = 'default') => { timersByLabel.set(label, performance.now()); },
    timeLog: (label = 'default', ...a) => {
      const t = timersByLabel.get(label);
      if (t !== undefined) writeLine(false, label + ': ' + (performance.now() - t).toFixed(3) + 'ms' + (a.length ? ' ' + format(...a) : ''));
    },
    timeEnd: (label = 'default') => {
      const t = timersByLabel.get(label);
      if (t !== undefined) { timersByLabel.delete(label); writeLine(false, label + ': ' + (performance.now() - t).toFixed(3) + 'ms'); }
    },
  };
  console.groupCollapsed = console.group;
  hide(G, 'console', console);

  // ---------------------------------------------------------------- timers
  let timerSeq = 0;
  const timers = new Map();
  class Timeout {
    constructor(id) { hide(this, '_id', id); }
    ref() { return this; }
    unref() { return this; }
    hasRef() { return true; }
    refresh() { const t = timers.get(this._id); if (t) t.at = Date.now() + t.ms; return this; }
    [Symbol.toPrimitive]() { return this._id; }
  }
  function addTimer(fn, ms, args, repeat) {
    if (typeof fn !== 'function') throw new TypeError('The "callback" argument must be of type function. Received ' + inspect(fn));
    ms = Number(ms);
    if (!(ms >= 1 && ms <= 2147483647)) ms = repeat ? 1 : 0;
    const id = ++timerSeq;
    timers.set(id, { id, at: Date.now() + ms, ms, fn, args, repeat });
    return new Timeout(id);
  }
  function clearTimer(t) {
    if (t === undefined || t === null) return;
    timers.delete(typeof t === 'object' ? t._id : Number(t));
  }
  function earliest() {
    let best = null;
    for (const t of timers.values()) if (best === null || t.at < best.at || (t.at === best.at && t.id < best.id)) best = t;
    return best;
  }
  hide(G, 'setTimeout', (fn, ms, ...args) => addTimer(fn, ms, args, false));
  hide(G, 'setInterval', (fn, ms, ...args) => addTimer(fn, ms, args, true));
  hide(G, 'setImmediate', (fn, ...args) => addTimer(fn, 0, args, false));
  hide(G, 'clearTimeout', clearTimer);
  hide(G, 'clearInterval', clearTimer);
  hide(G, 'clearImmediate', clearTimer);
  if (typeof G.queueMicrotask !== 'function') {
    hide(G, 'queueMicrotask', (fn) => { Promise.resolve().then(() => fn()); });
  }
  hide(G, 'global', G);

  // ---------------------------------------------------------------- text encoding
  function utf8Encode(s) {
    s = String(s);
    const out = [];
    for (let i = 0; i < s.length; i++) {
      let c = s.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
        const d = s.charCodeAt(i + 1);
        if (d >= 0xdc00 && d <= 0xdfff) { c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00); i++; } else c = 0xfffd;
      } else if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
      if (c < 0x80) out.push(c);
      else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
      else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
      else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    }
    return new Uint8Array(out);
  }
  function utf8Decode(b) {
    let s = '';
    const parts = [];
    for (let i = 0; i < b.length;) {
      const c = b[i];
      let cp = 0xfffd, n = 1;
      if (c < 0x80) { cp = c; }
      else if (c >= 0xc2 && c < 0xe0 && i + 1 < b.length && (b[i + 1] & 0xc0) === 0x80) { cp = ((c & 31) << 6) | (b[i + 1] & 63); n = 2; }
      else if (c >= 0xe0 && c < 0xf0 && i + 2 < b.length && (b[i + 1] & 0xc0) === 0x80 && (b[i + 2] & 0xc0) === 0x80) {
        cp = ((c & 15) << 12) | ((b[i + 1] & 63) << 6) | (b[i + 2] & 63); n = 3;
        if (cp < 0x800) { cp = 0xfffd; n = 1; }
      } else if (c >= 0xf0 && c < 0xf5 && i + 3 < b.length && (b[i + 1] & 0xc0) === 0x80 && (b[i + 2] & 0xc0) === 0x80 && (b[i + 3] & 0xc0) === 0x80) {
        cp = ((c & 7) << 18) | ((b[i + 1] & 63) << 12) | ((b[i + 2] & 63) << 6) | (b[i + 3] & 63); n = 4;
        if (cp < 0x10000 || cp > 0x10ffff) { cp = 0xfffd; n = 1; }
      }
      s += String.fromCodePoint(cp);
      i += n;
      if (s.length > 8192) { parts.push(s); s = ''; }
    }
    parts.push(s);
    return parts.join('');
  }
  function toBytes(data) {
    if (data instanceof Uint8Array) return data;
    if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    if (data instanceof ArrayBuffer) return new Uint8Array(data);
    throw new TypeError('The "input" argument must be an instance of ArrayBuffer or ArrayBufferView');
  }
  function bytesToBinary(b) {
    let s = '';
    for (let i = 0; i < b.length; i += 8192) s += String.fromCharCode.apply(null, b.subarray(i, i + 8192));
    return s;
  }
  if (typeof G.TextEncoder !== 'function') {
    class TextEncoder {
      get encoding() { return 'utf-8'; }
      encode(s = '') { return utf8Encode(s); }
      encodeInto(s, dest) { const b = utf8Encode(s); const n = Math.min(b.length, dest.length); dest.set(b.subarray(0, n)); return { read: s.length, written: n }; }
    }
    hide(G, 'TextEncoder', TextEncoder);
  }
  if (typeof G.TextDecoder !== 'function') {
    class TextDecoder {
      constructor(label = 'utf-8') {
        label = String(label).toLowerCase();
        if (label !== 'utf-8' && label !== 'utf8') throw new RangeError('The "' + label + '" encoding is not supported');
      }
      get encoding() { return 'utf-8'; }
      decode(data) { return data === undefined ? '' : utf8Decode(toBytes(data)); }
    }
    hide(G, 'TextDecoder', TextDecoder);
  }

  // ---------------------------------------------------------------- Buffer (minimal)
  const b64chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  class Buffer extends Uint8Array {
    static from(x, enc) {
      if (typeof x === 'string') {
        enc = (enc || 'utf8').toLowerCase();
        if (enc === 'hex') { const b = new Buffer(x.length >> 1); for (let i = 0; i < b.length; i++) b[i] = parseInt(x.substr(i * 2, 2), 16); return b; }
        if (enc === 'base64') { const bin = atob(x.replace(/[^A-Za-z0-9+/]/g, '')); const b = new Buffer(bin.length); for (let i = 0; i < bin.length; i++) b[i] = bin.charCodeAt(i); return b; }
        if (enc === 'latin1' || enc === 'binary' || enc === 'ascii') { const b = new Buffer(x.length); for (let i = 0; i < x.length; i++) b[i] = x.charCodeAt(i) & 255; return b; }
        const u = utf8Encode(x);
        return new Buffer(u.buffer, u.byteOffset, u.length);
      }
      if (x instanceof ArrayBuffer) return new Buffer(x);
      const b = new Buffer(x.length);
      for (let i = 0; i < x.length; i++) b[i] = x[i];
      return b;
    }
    static alloc(n, fill) { const b = new Buffer(n); if (fill !== undefined) b.fill(typeof fill === 'string' ? fill.charCodeAt(0) : fill); return b; }
    static isBuffer(x) { return x instanceof Buffer; }
    static byteLength(s) { return typeof s === 'string' ? utf8Encode(s).length : s.byteLength; }
    static concat(list) {
      const n = list.reduce((a, b) => a + b.length, 0);
      const out = new Buffer(n);
      let off = 0;
      for (const b of list) { out.set(b, off); off += b.length; }
      return out;
    }
    toString(enc, start = 0, end = this.length) {
      const b = this.subarray(start, end);
      enc = (enc || 'utf8').toLowerCase();
      if (enc === 'hex') return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
      if (enc === 'base64') return btoa(bytesToBinary(b));
      if (enc === 'latin1' || enc === 'binary' || enc === 'ascii') return bytesToBinary(b);
      return utf8Decode(b);
    }
    toJSON() { return { type: 'Buffer', data: Array.from(this) }; }
    equals(o) { if (o.length !== this.length) return false; for (let i = 0; i < o.length; i++) if (o[i] !== this[i]) return false; return true; }
  }
  void b64chars;
  hide(G, 'Buffer', Buffer);
  const asBuffer = (u8) => new Buffer(u8.buffer, u8.byteOffset, u8.length);

  // ---------------------------------------------------------------- path
  function normalizeParts(p, abs) {
    const out = [];
    for (const seg of p.split('/')) {
      if (seg === '' || seg === '.') continue;
      if (seg === '..') { if (out.length && out[out.length - 1] !== '..') out.pop(); else if (!abs) out.push('..'); } else out.push(seg);
    }
    return out;
  }
  const path = {
    sep: '/', delimiter: ':',
    normalize(p) {
      if (p === '') return '.';
      const abs = p.startsWith('/');
      const trailing = p.endsWith('/');
      let s = normalizeParts(p, abs).join('/');
      if (!s && !abs) s = '.';
      if (s && trailing) s += '/';
      return (abs ? '/' : '') + s;
    },
    join(...parts) { const j = parts.filter((x) => x !== '').join('/'); return j ? path.normalize(j) : '.'; },
    resolve(...parts) {
      let r = '';
      for (let i = parts.length - 1; i >= 0 && !r.startsWith('/'); i--) if (parts[i]) r = parts[i] + (r ? '/' + r : '');
      if (!r.startsWith('/')) r = process.cwd() + (r ? '/' + r : '');
      return '/' + normalizeParts(r, true).join('/');
    },
    isAbsolute(p) { return p.startsWith('/'); },
    dirname(p) {
      if (!p) return '.';
      const s = p.replace(/\/+$/, '');
      if (!s) return '/';
      const i = s.lastIndexOf('/');
      if (i < 0) return '.';
      return i === 0 ? '/' : s.slice(0, i).replace(/\/+$/, '') || '/';
    },
    basename(p, ext) {
      let b = p.replace(/\/+$/, '');
      b = b.slice(b.lastIndexOf('/') + 1);
      if (ext && b.endsWith(ext) && b !== ext) b = b.slice(0, -ext.length);
      return b;
    },
    extname(p) { const b = path.basename(p); const i = b.lastIndexOf('.'); return i <= 0 ? '' : b.slice(i); },
    relative(from, to) {
      const f = normalizeParts(path.resolve(from), true), t = normalizeParts(path.resolve(to), true);
      let i = 0;
      while (i < f.length && i < t.length && f[i] === t[i]) i++;
      return [...Array(f.length - i).fill('..'), ...t.slice(i)].join('/');
    },
    parse(p) {
      const base = path.basename(p), ext = path.extname(p);
      return { root: p.startsWith('/') ? '/' : '', dir: path.dirname(p), base, ext, name: ext ? base.slice(0, -ext.length) : base };
    },
    format(o) { const dir = o.dir || o.root || ''; const base = o.base || (o.name || '') + (o.ext || ''); return dir ? (dir.endsWith('/') ? dir + base : dir + '/' + base) : base; },
  };
  path.posix = path;

  // ---------------------------------------------------------------- fs
  function encodingOf(o) { return typeof o === 'string' ? o : o && o.encoding ? o.encoding : null; }
  function pathArg(p) {
    if (typeof URL === 'function' && p instanceof URL) p = p.pathname;
    if (typeof p !== 'string') throw new TypeError('The "path" argument must be of type string. Received ' + inspect(p));
    return p;
  }
  class Stats {
    constructor(o) {
      this.dev = 0; this.mode = o.mode; this.nlink = 1; this.uid = 0; this.gid = 0; this.size = o.size;
      this.blksize = 4096; this.blocks = Math.ceil(o.size / 512);
      this.atimeMs = this.mtimeMs = this.ctimeMs = this.birthtimeMs = o.mtimeMs;
      this.atime = this.mtime = this.ctime = this.birthtime = new Date(o.mtimeMs);
      hide(this, '_type', o.type);
    }
    isFile() { return this._type === 'file'; }
    isDirectory() { return this._type === 'dir'; }
    isSymbolicLink() { return this._type === 'symlink'; }
    isFIFO() { return false; }
    isSocket() { return false; }
    isBlockDevice() { return false; }
    isCharacterDevice() { return false; }
  }
  class Dirent {
    constructor(name, type, dir) { this.name = name; this.parentPath = this.path = dir; hide(this, '_type', type); }
    isFile() { return this._type === 'file'; }
    isDirectory() { return this._type === 'dir'; }
    isSymbolicLink() { return this._type === 'symlink'; }
  }
  function decodeBytes(u8, enc) {
    const b = asBuffer(u8);
    return enc ? b.toString(enc) : b;
  }
  function writeData(p, data, opts, flag) {
    p = pathArg(p);
    if (opts && typeof opts === 'object' && opts.flag) flag = opts.flag;
    if (typeof data === 'string') return host.fs('write', p, data, flag);
    if (ArrayBuffer.isView(data) || data instanceof ArrayBuffer) return host.fs('writeLatin1', p, bytesToBinary(toBytes(data)), flag);
    return host.fs('write', p, String(data), flag);
  }
  const fs = {
    readFileSync(p, opts) {
      const enc = encodingOf(opts);
      if (p === 0 || p === '/dev/stdin') return decodeBytes(host.stdin(), enc);
      p = pathArg(p);
      if (enc && /^utf-?8$/i.test(enc)) return host.fs('readText', p);
      return decodeBytes(host.fs('read', p), enc);
    },
    writeFileSync(p, data, opts) {
      if (p === 1 || p === 2 || p === '/dev/stdout' || p === '/dev/stderr') {
        const s = typeof data === 'string' ? data : asBuffer(toBytes(data)).toString();
        return (p === 2 || p === '/dev/stderr' ? host.stderr : host.stdout)(s);
      }
      writeData(p, data, opts, 'w');
    },
    appendFileSync(p, data, opts) { writeData(p, data, opts, 'a'); },
    existsSync(p) { try { return host.fs('exists', pathArg(p)) === '1'; } catch (e) { return false; } },
    readdirSync(p, opts) {
      p = pathArg(p);
      const ents = JSON.parse(host.fs('readdir', p));
      if (opts && opts.withFileTypes) return ents.map((e) => new Dirent(e.name, e.type, p));
      return ents.map((e) => e.name);
    },
    mkdirSync(p, opts) {
      p = pathArg(p);
      const rec = !!(opts && typeof opts === 'object' && opts.recursive);
      const existed = rec && fs.existsSync(p);
      host.fs('mkdir', p, rec ? '1' : '0');
      return rec && !existed ? path.resolve(p) : undefined;
    },
    statSync(p, opts) {
      try { return new Stats(JSON.parse(host.fs('stat', pathArg(p)))); } catch (e) {
        if (opts && opts.throwIfNoEntry === false && e.code === 'ENOENT') return undefined;
        throw e;
      }
    },
    lstatSync(p) { return new Stats(JSON.parse(host.fs('lstat', pathArg(p)))); },
    unlinkSync(p) { host.fs('unlink', pathArg(p)); },
    rmdirSync(p, opts) { if (opts && opts.recursive) host.fs('rm', pathArg(p), '1', '0'); else host.fs('rmdir', pathArg(p)); },
    rmSync(p, opts) { host.fs('rm', pathArg(p), opts && opts.recursive ? '1' : '0', opts && opts.force ? '1' : '0'); },
    renameSync(a, b) { host.fs('rename', pathArg(a), pathArg(b)); },
    copyFileSync(a, b) { host.fs('copyFile', pathArg(a), pathArg(b)); },
    realpathSync(p) { return host.fs('realpath', pathArg(p)); },
    accessSync(p) { fs.statSync(p); },
    constants: { F_OK: 0, R_OK: 4, W_OK: 2, X_OK: 1 },
  };
  fs.Stats = Stats;
  fs.Dirent = Dirent;
  // The promise API and callback API wrap the synchronous one.
  const promises = {};
  for (const [name, fn] of Object.entries(fs)) {
    if (typeof fn !== 'function' || !name.endsWith('Sync')) continue;
    const base = name.slice(0, -4);
    promises[base] = (...a) => new Promise((resolve) => resolve(fn(...a)));
    fs[base] = (...a) => {
      const cb = typeof a[a.length - 1] === 'function' ? a.pop() : null;
      let res, err = null;
      try { res = fn(...a); } catch (e) { err = e; }
      if (base === 'exists') { if (cb) queueMicrotask(() => cb(res)); return; }
      if (cb) queueMicrotask(() => cb(err, res));
      else if (err) throw err;
    };
  }
  fs.promises = promises;

  // ---------------------------------------------------------------- process
  const env = {};
  const process = {
    argv: ['/usr/local/bin/node'], argv0: 'node', execArgv: [], execPath: '/usr/local/bin/node',
    env, exitCode: undefined, pid: 1, ppid: 0, platform: 'linux', arch: 'wasm32', title: 'node',
    version: 'v20.0.0', versions: { node: '20.0.0' }, release: { name: 'node' },
    cwd: () => cwd,
    chdir: (d) => { cwd = host.fs('chdir', pathArg(d)); },
    exit(code) {
      if (code === undefined) code = process.exitCode;
      host.exit(String((Number(code) || 0) & 255));
    },
    nextTick: (fn, ...args) => queueMicrotask(() => fn(...args)),
    hrtime: Object.assign((prev) => {
      const t = performance.now();
      let s = Math.floor(t / 1000), ns = Math.floor((t % 1000) * 1e6);
      if (prev) { s -= prev[0]; ns -= prev[1]; if (ns < 0) { s--; ns += 1e9; } }
      return [s, ns];
    }, { bigint: () => BigInt(Math.floor(performance.now() * 1e6)) }),
    uptime: () => performance.now() / 1000,
    memoryUsage: () => ({ rss: 0, heapTotal: 0, heapUsed: 0, external: 0, arrayBuffers: 0 }),
    on() { return process; }, once() { return process; }, off() { return process; }, emit() { return false; },
    stdout: { write: (s) => { host.stdout(typeof s === 'string' ? s : asBuffer(toBytes(s)).toString()); return true; }, isTTY: false, fd: 1 },
    stderr: { write: (s) => { host.stderr(typeof s === 'string' ? s : asBuffer(toBytes(s)).toString()); return true; }, isTTY: false, fd: 2 },
    stdin: { fd: 0, isTTY: false },
  };
  let cwd = '/';
  hide(G, 'process', process);

  // ---------------------------------------------------------------- require
  const util = {
    inspect, format,
    isDeepStrictEqual: (a, b) => inspect(a, { depth: null }) === inspect(b, { depth: null }),
    promisify: (fn) => (...a) => new Promise((res, rej) => fn(...a, (e, v) => (e ? rej(e) : res(v)))),
    types: { isPromise: (v) => v instanceof Promise, isDate: (v) => v instanceof Date, isRegExp: (v) => v instanceof RegExp },
    TextEncoder: G.TextEncoder, TextDecoder: G.TextDecoder,
  };
  // os answers from the sandbox's /etc and /proc (written by the host), as
  // the shell's hostname, id and nproc do.
  const sysFile = (f) => { try { return host.fs('readText', f); } catch (e) { return ''; } };
  const memKB = (key) => Number((sysFile('/proc/meminfo').match(new RegExp('^' + key + ':\\s*(\\d+)', 'm')) || [])[1] || 0);
  const os = {
    EOL: '\n', platform: () => 'linux', type: () => 'Linux', arch: () => 'wasm32', release: () => '6.1.0-hybox',
    cpus: () => [{ model: 'WebAssembly (wasm32)', speed: 0, times: { user: 0, nice: 0, sys: 0, idle: 0, irq: 0 } }],
    homedir: () => process.env.HOME || '/', tmpdir: () => '/tmp',
    hostname: () => sysFile('/etc/hostname').trim() || 'localhost',
    totalmem: () => memKB('MemTotal') * 1024, freemem: () => memKB('MemAvailable') * 1024,
    userInfo: () => {
      const line = sysFile('/etc/passwd').split('\n').find((l) => l.split(':')[2] === '1000') || 'user:x:1000:1000::/home/user:/bin/sh';
      const f = line.split(':');
      return { username: f[0], uid: Number(f[2]), gid: Number(f[3]), homedir: f[5], shell: f[6] || null };
    },
  };
  const builtins = { fs, 'fs/promises': promises, path, util, os, buffer: { Buffer }, process, timers: { setTimeout: G.setTimeout, setInterval: G.setInterval, clearTimeout, clearInterval: clearTimer } };
  const moduleCache = new Map();
  function findFile(p) {
    const tryFile = (f) => { try { return JSON.parse(host.fs('stat', f)).type === 'file' ? f : null; } catch (e) { return null; } };
    let f = tryFile(p) || tryFile(p + '.js') || tryFile(p + '.json') || tryFile(p + '.cjs');
    if (f) return f;
    try {
      const pkg = JSON.parse(host.fs('readText', p + '/package.json'));
      if (pkg.main) { f = findFile(path.join(p, pkg.main)); if (f) return f; }
    } catch (e) { /* no package.json */ }
    return tryFile(p + '/index.js') || tryFile(p + '/index.json');
  }
  function resolveModule(spec, dir) {
    if (spec.startsWith('./') || spec.startsWith('../') || spec.startsWith('/') || spec === '.' || spec === '..') {
      return findFile(path.resolve(dir, spec));
    }
    for (let d = dir; ; d = path.dirname(d)) {
      const f = findFile(path.join(d, 'node_modules', spec));
      if (f) return f;
      if (d === '/') return null;
    }
  }
  function makeRequire(dir) {
    const req = (spec) => {
      spec = String(spec);
      const name = spec.startsWith('node:') ? spec.slice(5) : spec;
      if (Object.prototype.hasOwnProperty.call(builtins, name)) return builtins[name];
      const file = resolveModule(spec, dir);
      if (!file) {
        const e = new Error("Cannot find module '" + spec + "'");
        e.code = 'MODULE_NOT_FOUND';
        throw e;
      }
      return loadModule(file);
    };
    req.resolve = (spec) => resolveModule(spec, dir) || spec;
    req.cache = {};
    return req;
  }
  function loadModule(file) {
    const cached = moduleCache.get(file);
    if (cached) return cached.exports;
    const src = host.fs('readText', file);
    const module = { exports: {}, filename: file, id: file, loaded: false };
    moduleCache.set(file, module);
    try {
      if (file.endsWith('.json')) { module.exports = JSON.parse(src); } else {
        const body = src.startsWith('#!') ? '//' + src : src;
        const fn = (0, eval)('(function (exports, require, module, __filename, __dirname) {' + body + '\n})');
        fn.call(module.exports, module.exports, makeRequire(path.dirname(file)), module, file, path.dirname(file));
      }
    } catch (e) { moduleCache.delete(file); throw e; }
    module.loaded = true;
    return module.exports;
  }
  hide(G, 'require', makeRequire('/'));

  // ---------------------------------------------------------------- Math.random
  // VMs are cloned from one memory image, so QuickJS's own PRNG state would
  // be shared; this xoshiro128** generator is seeded per VM by the host.
  let r0 = 1, r1 = 2, r2 = 3, r3 = 4;
  const rotl = (x, k) => (x << k) | (x >>> (32 - k));
  function next32() {
    const out = Math.imul(rotl(Math.imul(r1, 5), 7), 9) >>> 0;
    const t = r1 << 9;
    r2 ^= r0; r3 ^= r1; r1 ^= r2; r0 ^= r3; r2 ^= t; r3 = rotl(r3, 11);
    return out;
  }
  hide(Math, 'random', { random() { return ((next32() >>> 5) * 67108864 + (next32() >>> 6)) / 9007199254740992; } }.random);

  // ---------------------------------------------------------------- fetch
  // A WHATWG-like subset. The host performs each request synchronously
  // under the sandbox's egress policy; the promise is settled on return.
  const tokenRe = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
  function headerName(n) {
    n = String(n);
    if (!tokenRe.test(n)) throw new TypeError('Headers: invalid header name "' + n + '"');
    return n.toLowerCase();
  }
  function headerValue(v) {
    v = String(v).replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, '');
    if (/[\0\r\n]/.test(v)) throw new TypeError('Headers: invalid header value "' + v + '"');
    return v;
  }
  class Headers {
    constructor(init) {
      hide(this, '_list', []);
      if (init === undefined || init === null) return;
      if (init instanceof Headers) { for (const [k, v] of init._list) this._list.push([k, v]); return; }
      if (typeof init !== 'object' && typeof init !== 'function') throw new TypeError("Headers: init must be an object, an array of pairs or Headers");
      if (typeof init[Symbol.iterator] === 'function') {
        for (const pair of init) {
          const p = Array.from(pair);
          if (p.length !== 2) throw new TypeError('Headers: each header pair must be [name, value]');
          this.append(p[0], p[1]);
        }
        return;
      }
      for (const k of Object.keys(init)) this.append(k, init[k]);
    }
    append(name, value) { this._list.push([headerName(name), headerValue(value)]); }
    set(name, value) {
      const n = headerName(name), v = headerValue(value);
      const i = this._list.findIndex((e) => e[0] === n);
      if (i < 0) { this._list.push([n, v]); return; }
      this._list[i][1] = v;
      for (let j = this._list.length - 1; j > i; j--) if (this._list[j][0] === n) this._list.splice(j, 1);
    }
    delete(name) { const n = headerName(name); for (let j = this._list.length - 1; j >= 0; j--) if (this._list[j][0] === n) this._list.splice(j, 1); }
    get(name) {
      const n = headerName(name);
      const vs = this._list.filter((e) => e[0] === n).map((e) => e[1]);
      return vs.length ? vs.join(', ') : null;
    }
    getSetCookie() { return this._list.filter((e) => e[0] === 'set-cookie').map((e) => e[1]); }
    has(name) { const n = headerName(name); return this._list.some((e) => e[0] === n); }
    *entries() {
      const names = [...new Set(this._list.map((e) => e[0]))].sort();
      for (const n of names) {
        if (n === 'set-cookie') for (const c of this.getSetCookie()) yield [n, c];
        else yield [n, this.get(n)];
      }
    }
    *keys() { for (const [k] of this.entries()) yield k; }
    *values() { for (const [, v] of this.entries()) yield v; }
    forEach(fn, thisArg) { for (const [k, v] of this.entries()) fn.call(thisArg, v, k, this); }
    [Symbol.iterator]() { return this.entries(); }
    get [Symbol.toStringTag]() { return 'Headers'; }
  }
  hide(G, 'Headers', Headers);

  function formEncode(s) {
    return Array.from(utf8Encode(s), (b) => (
      (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a) || b === 0x2a || b === 0x2d || b === 0x2e || b === 0x5f
        ? String.fromCharCode(b) : b === 0x20 ? '+' : '%' + b.toString(16).toUpperCase().padStart(2, '0'))).join('');
  }
  function formDecode(s) {
    const bytes = [];
    s = s.replace(/\+/g, ' ');
    for (let i = 0; i < s.length; i++) {
      if (s[i] === '%' && /^[0-9A-Fa-f]{2}$/.test(s.substr(i + 1, 2))) { bytes.push(parseInt(s.substr(i + 1, 2), 16)); i += 2; } else for (const b of utf8Encode(s[i])) bytes.push(b);
    }
    return utf8Decode(new Uint8Array(bytes));
  }
  if (typeof G.URLSearchParams !== 'function') {
    class URLSearchParams {
      constructor(init) {
        hide(this, '_list', []);
        if (init === undefined || init === null) return;
        if (init instanceof URLSearchParams) { this._list.push(...init._list.map((e) => [e[0], e[1]])); return; }
        if (typeof init === 'object') {
          if (typeof init[Symbol.iterator] === 'function') { for (const p of init) { const a = Array.from(p); if (a.length !== 2) throw new TypeError('URLSearchParams: each pair must be [name, value]'); this.append(a[0], a[1]); } } else for (const k of Object.keys(init)) this.append(k, init[k]);
          return;
        }
        let s = String(init);
        if (s.startsWith('?')) s = s.slice(1);
        for (const part of s.split('&')) {
          if (!part) continue;
          const i = part.indexOf('=');
          this._list.push(i < 0 ? [formDecode(part), ''] : [formDecode(part.slice(0, i)), formDecode(part.slice(i + 1))]);
        }
      }
      append(k, v) { this._list.push([String(k), String(v)]); }
      set(k, v) { k = String(k); const i = this._list.findIndex((e) => e[0] === k); if (i < 0) this._list.push([k, String(v)]); else { this._list[i][1] = String(v); this._list = this._list.filter((e, j) => j <= i || e[0] !== k); } }
      get(k) { const e = this._list.find((x) => x[0] === String(k)); return e ? e[1] : null; }
      getAll(k) { return this._list.filter((x) => x[0] === String(k)).map((x) => x[1]); }
      has(k) { return this._list.some((x) => x[0] === String(k)); }
      delete(k) { k = String(k); hide(this, '_list', this._list.filter((x) => x[0] !== k)); }
      sort() { this._list.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)); }
      get size() { return this._list.length; }
      forEach(fn, thisArg) { for (const [k, v] of this._list) fn.call(thisArg, v, k, this); }
      *entries() { for (const [k, v] of this._list) yield [k, v]; }
      *keys() { for (const [k] of this._list) yield k; }
      *values() { for (const [, v] of this._list) yield v; }
      [Symbol.iterator]() { return this.entries(); }
      toString() { return this._list.map(([k, v]) => formEncode(k) + '=' + formEncode(v)).join('&'); }
      get [Symbol.toStringTag]() { return 'URLSearchParams'; }
    }
    hide(G, 'URLSearchParams', URLSearchParams);
  }

  // extractBody returns [bytes, default content type] for a body init.
  function extractBody(body) {
    if (body === undefined || body === null) return [null, null];
    if (typeof body === 'string') return [utf8Encode(body), 'text/plain;charset=UTF-8'];
    if (body instanceof G.URLSearchParams) return [utf8Encode(body.toString()), 'application/x-www-form-urlencoded;charset=UTF-8'];
    if (body instanceof ArrayBuffer) return [new Uint8Array(body.slice(0)), null];
    if (ArrayBuffer.isView(body)) return [new Uint8Array(body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength)), null];
    return [utf8Encode(String(body)), 'text/plain;charset=UTF-8'];
  }
  const methods = ['DELETE', 'GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH'];
  function urlOf(input) {
    const s = typeof input === 'string' ? input : input && typeof input.href === 'string' ? input.href : String(input);
    if (!/^https?:\/\/[^\/?#]/i.test(s)) throw new TypeError('Failed to parse URL from ' + s);
    return s;
  }
  class Body {
    _initBody(bytes) { hide(this, '_bytes', bytes); hide(this, '_used', false); }
    get bodyUsed() { return this._used; }
    get body() { return this._bytes === null ? null : this._bytes; }
    _take() {
      if (this._used) return Promise.reject(new TypeError('Body is unusable: Body has already been read'));
      this._used = true;
      return Promise.resolve(this._bytes === null ? new Uint8Array(0) : this._bytes);
    }
    arrayBuffer() { return this._take().then((b) => b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength)); }
    bytes() { return this._take().then((b) => new Uint8Array(b)); }
    text() { return this._take().then((b) => utf8Decode(b)); }
    json() { return this.text().then((t) => JSON.parse(t)); }
  }
  class Request extends Body {
    constructor(input, init = {}) {
      super();
      const base = input instanceof Request ? input : null;
      this.url = base ? base.url : urlOf(input);
      let method = init.method !== undefined ? String(init.method) : base ? base.method : 'GET';
      if (methods.includes(method.toUpperCase())) method = method.toUpperCase();
      if (!tokenRe.test(method)) throw new TypeError("'" + method + "' is not a valid HTTP method.");
      this.method = method;
      this.headers = new Headers(init.headers !== undefined ? init.headers : base ? base.headers : undefined);
      this.redirect = init.redirect !== undefined ? String(init.redirect) : base ? base.redirect : 'follow';
      if (!['follow', 'manual', 'error'].includes(this.redirect)) throw new TypeError("Failed to construct 'Request': '" + this.redirect + "' is not a valid redirect mode");
      this.signal = init.signal !== undefined ? init.signal : base ? base.signal : undefined;
      let bytes = null;
      if (init.body !== undefined && init.body !== null) {
        const [b, type] = extractBody(init.body);
        bytes = b;
        if (type && !this.headers.has('content-type')) this.headers.set('content-type', type);
      } else if (base && base._bytes !== null) {
        bytes = base._bytes;
      }
      if (bytes !== null && (method === 'GET' || method === 'HEAD')) throw new TypeError('Request with GET/HEAD method cannot have body.');
      this._initBody(bytes);
    }
    clone() { return new Request(this); }
    get [Symbol.toStringTag]() { return 'Request'; }
  }
  class Response extends Body {
    constructor(body, init = {}) {
      super();
      const [bytes, type] = extractBody(body);
      this.status = init.status !== undefined ? Number(init.status) : 200;
      if (!(this.status >= 200 && this.status <= 599)) throw new RangeError("Failed to construct 'Response': The status provided (" + this.status + ') is outside the range [200, 599].');
      this.statusText = init.statusText !== undefined ? String(init.statusText) : '';
      this.headers = new Headers(init.headers);
      if (type && !this.headers.has('content-type')) this.headers.set('content-type', type);
      this.url = '';
      this.redirected = false;
      this.type = 'default';
      this._initBody(bytes);
    }
    get ok() { return this.status >= 200 && this.status <= 299; }
    clone() {
      if (this._used) throw new TypeError('Response.clone: Body has already been consumed.');
      const r = new Response(null, { status: this.status < 200 ? 200 : this.status, statusText: this.statusText, headers: this.headers });
      r.status = this.status; r.url = this.url; r.redirected = this.redirected; r.type = this.type;
      r._bytes = this._bytes;
      return r;
    }
    static json(data, init = {}) {
      const h = new Headers(init.headers);
      if (!h.has('content-type')) h.set('content-type', 'application/json');
      return new Response(JSON.stringify(data), { ...init, headers: h });
    }
    static error() { const r = new Response(null); r.status = 0; r.type = 'error'; return r; }
    get [Symbol.toStringTag]() { return 'Response'; }
  }
  hide(G, 'Request', Request);
  hide(G, 'Response', Response);
  hide(G, 'fetch', function fetch(input, init) {
    return new Promise((resolve, reject) => {
      const req = new Request(input, init);
      if (req.signal && req.signal.aborted) {
        const e = new Error('This operation was aborted');
        e.name = 'AbortError';
        throw e;
      }
      const head = JSON.stringify({ method: req.method, url: req.url, headers: req.headers._list, redirect: req.redirect });
      const b = req._bytes;
      let raw;
      try {
        raw = host.fetch(head, b && b.length ? b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) : undefined);
      } catch (e) {
        reject(new TypeError(e && e.message !== undefined ? e.message : String(e)));
        return;
      }
      const meta = JSON.parse(raw.head);
      const res = new Response(null, { status: 200 });
      res.status = meta.status;
      res.statusText = meta.reason;
      res.headers = new Headers(meta.headers);
      res.url = meta.url;
      res.redirected = !!meta.redirected;
      res.type = 'basic';
      res._bytes = new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength);
      resolve(res);
    });
  });

  // ---------------------------------------------------------------- host API
  return {
    seed(hex) {
      r0 = parseInt(hex.slice(0, 8), 16) | 0; r1 = parseInt(hex.slice(8, 16), 16) | 0;
      r2 = parseInt(hex.slice(16, 24), 16) | 0; r3 = parseInt(hex.slice(24, 32), 16) | 0;
      if ((r0 | r1 | r2 | r3) === 0) r0 = 1;
    },
    setup(json) {
      const o = JSON.parse(json);
      process.argv = o.argv;
      for (const k of Object.keys(env)) delete env[k];
      Object.assign(env, o.env || {});
      cwd = o.cwd || '/';
      hide(G, 'require', makeRequire(cwd));
      process.mainModule = undefined;
    },
    inspect: (v) => inspect(v),
    format: (v) => format(v),
    describe(e) {
      if (isError(e)) {
        let name = 'Error', message = '';
        try { name = String(e.name); } catch (x) { /* ignore */ }
        try { message = String(e.message); } catch (x) { /* ignore */ }
        return JSON.stringify({ name, message, text: errorText(e) });
      }
      const s = inspect(e);
      return JSON.stringify({ name: 'Uncaught', message: s, text: 'Uncaught ' + s });
    },
    nextTimer() {
      const t = earliest();
      return t === null ? -1 : Math.max(0, t.at - Date.now());
    },
    runTimer() {
      const t = earliest();
      if (t === null) return;
      if (t.repeat) t.at = Math.max(Date.now(), t.at) + t.ms; else timers.delete(t.id);
      t.fn.apply(undefined, t.args);
    },
    clearTimers() { timers.clear(); },
    unwrapAsync: (p) => p.then((r) => (r !== null && typeof r === 'object' && 'value' in r ? r.value : r)),
    exitCode() { return String((Number(process.exitCode) || 0) & 255); },
    runMain(fn, file) {
      const module = { exports: {}, filename: file, id: '.', loaded: false };
      moduleCache.set(file, module);
      process.mainModule = module;
      const dir = path.dirname(file);
      const req = makeRequire(dir);
      req.main = module;
      return fn.call(module.exports, module.exports, req, module, file, dir);
    },
  };
})()
