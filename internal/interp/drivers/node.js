// Airlock code-context driver for Node.js (standard library only).
//
// Started by the daemon as `node --expose-internals -e <this file>` with
// stdin open. It reads the frame nonce (the first line on stdin), then one
// JSON command per line, and runs each as a cell in the main realm
// (vm.Script.runInThisContext), so declarations persist between cells; top-level await uses Node's own REPL rewriting.
// Frames are written straight to fd 1: "\x1e" NONCE " " JSON "\n".
// process.stdout, process.stderr and console are replaced so that what the
// cell writes becomes frames, in order; what child processes write to the
// inherited fds 1 and 2 arrives raw. The end of a cell is marked on both
// fds. See internal/interp/drivers.go for the protocol.
(() => {
  'use strict';
  const fs = require('fs');
  const path = require('path');
  const util = require('util');
  const vm = require('vm');
  const { Console } = require('console');
  const { Writable, Readable } = require('stream');
  const { StringDecoder } = require('string_decoder');

  const env = process.env;
  const maxOut = parseInt(env.AIRLOCK_INTERP_MAX_OUTPUT || '1048576', 10);
  const maxText = parseInt(env.AIRLOCK_INTERP_MAX_TEXT || '1048576', 10);
  const maxImage = parseInt(env.AIRLOCK_INTERP_MAX_IMAGE || '8388608', 10);
  delete env.AIRLOCK_INTERP_MAX_OUTPUT;
  delete env.AIRLOCK_INTERP_MAX_TEXT;
  delete env.AIRLOCK_INTERP_MAX_IMAGE;
  // The nonce is the first line on stdin, never in the environment (see
  // drivers.go); nothing is sent before it has arrived.
  let prefix = null;

  let processTopLevelAwait = null;
  try {
    ({ processTopLevelAwait } = require('internal/repl/await'));
  } catch (e) {
    // Without it, a cell that awaits runs in an async function.
  }

  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  function writeAll(fd, buf) {
    let off = 0;
    while (off < buf.length) {
      try {
        off += fs.writeSync(fd, buf, off, buf.length - off);
      } catch (e) {
        if (e.code !== 'EAGAIN') throw e;
        Atomics.wait(sleeper, 0, 0, 1);
      }
    }
  }
  function send(obj, fd = 1) {
    writeAll(fd, Buffer.from(prefix + JSON.stringify(obj) + '\n', 'utf8'));
  }

  const st = { cell: null, out: 0, truncated: false, interrupt: null };

  function emitText(stream, text) {
    if (!text || st.cell === null) return;
    const room = maxOut - st.out;
    if (room <= 0) {
      st.truncated = true;
      return;
    }
    if (text.length > room) {
      text = text.slice(0, room);
      st.truncated = true;
    }
    st.out += text.length;
    send({ t: stream, d: text });
  }

  function makeStream(name, fd) {
    const dec = new StringDecoder('utf8');
    const w = new Writable({
      decodeStrings: false,
      write(chunk, encoding, cb) {
        emitText(name, typeof chunk === 'string' ? chunk : dec.write(chunk));
        cb();
      },
    });
    w.fd = fd;
    w.isTTY = false;
    return w;
  }
  const stdout = makeStream('stdout', 1);
  const stderr = makeStream('stderr', 2);
  const cmdIn = process.stdin;
  const noInput = new Readable({ read() { this.push(null); } });
  for (const [k, v] of [['stdout', stdout], ['stderr', stderr], ['stdin', noInput]]) {
    Object.defineProperty(process, k, { configurable: true, enumerable: false, get: () => v });
  }
  globalThis.console = new Console({ stdout, stderr, colorMode: false });

  function cap(s) {
    return s.length > maxText ? s.slice(0, maxText) + '\n...[truncated]' : s;
  }

  function isPNG(v) {
    return Buffer.isBuffer(v) && v.length > 8 && v.readUInt32BE(0) === 0x89504e47;
  }

  // bundle returns the MIME bundle shown for value.
  function bundle(value) {
    if (value && typeof value === 'object' && value[mimeKey]) return value[mimeKey];
    const data = { 'text/plain': cap(util.inspect(value, { depth: 4, maxArrayLength: 200, breakLength: 100 })) };
    if (isPNG(value)) {
      if (value.length > maxImage) data['x-airlock/omitted'] = `image/png image of ${value.length} bytes`;
      else data['image/png'] = value.toString('base64');
    } else if (value !== null && typeof value === 'object' &&
        (Array.isArray(value) || Object.getPrototypeOf(value) === Object.prototype || Object.getPrototypeOf(value) === null)) {
      try {
        const s = JSON.stringify(value);
        if (s !== undefined && s.length <= maxText) data['application/json'] = JSON.parse(s);
      } catch (e) {
        // Not JSON (cycles, BigInt): text only.
      }
    }
    return data;
  }

  function showResult(value, main) {
    send({ t: 'result', id: st.cell, main, data: bundle(value) });
  }

  // display(value) shows a value mid-cell; display.html(s), display.svg(s),
  // display.markdown(s), display.png(bufferOrBase64) and display.json(v)
  // show one kind of content.
  const mimeKey = Symbol('airlock.mime');
  const rich = (mime, v) => {
    const data = { 'text/plain': `<${mime}>` };
    if (mime === 'image/png') {
      const b = Buffer.isBuffer(v) ? v : Buffer.from(String(v), 'base64');
      if (b.length > maxImage) data['x-airlock/omitted'] = `image/png image of ${b.length} bytes`;
      else data[mime] = b.toString('base64');
    } else if (mime === 'application/json') {
      const s = JSON.stringify(v);
      if (s !== undefined && s.length > maxText) data['x-airlock/omitted'] = `application/json value of ${s.length} characters`;
      else data[mime] = JSON.parse(s);
    } else {
      data[mime] = cap(String(v));
    }
    return { [mimeKey]: data };
  };
  const display = (...values) => { for (const v of values) showResult(v, false); };
  display.html = (s) => showResult(rich('text/html', s), false);
  display.svg = (s) => showResult(rich('image/svg+xml', s), false);
  display.markdown = (s) => showResult(rich('text/markdown', s), false);
  display.png = (b) => showResult(rich('image/png', b), false);
  display.json = (v) => showResult(rich('application/json', v), false);
  globalThis.display = display;

  function errorOf(e) {
    if (e instanceof Error || (e && typeof e === 'object' && 'stack' in e)) {
      const lines = String(e.stack || '').split('\n')
        .filter((l) => !/\(node:|\bnode:internal|\[eval\]|at (new )?Script\.|at (async )?runCell /.test(l));
      return { name: String(e.name || 'Error'), value: cap(String(e.message)), traceback: cap(lines.join('\n')) };
    }
    return { name: 'Uncaught', value: cap(util.inspect(e)), traceback: '' };
  }

  process.on('uncaughtException', (e) => emitText('stderr', 'Uncaught ' + (e && e.stack ? e.stack : util.inspect(e)) + '\n'));
  process.on('unhandledRejection', (e) => emitText('stderr', 'Unhandled rejection: ' + (e && e.stack ? e.stack : util.inspect(e)) + '\n'));
  process.on('SIGINT', () => {
    if (st.interrupt) st.interrupt();
  });

  function compile(code, filename) {
    // `{ a: 1 }` is an object, not a block, as in the REPL.
    if (/^\s*{/.test(code) && !/;\s*$/.test(code)) {
      try {
        return { script: new vm.Script(`(${code.trim()})\n`, { filename }), wrapped: false };
      } catch (e) {
        // Not an expression: compile it as it is.
      }
    }
    if (code.includes('await')) {
      let w = null;
      if (processTopLevelAwait) {
        w = processTopLevelAwait(code);
      } else {
        try {
          new vm.Script(code, { filename });
        } catch (e) {
          w = `(async () => { ${code}\n})().then((value) => ({ value }))`;
        }
      }
      if (w !== null) return { script: new vm.Script(w, { filename }), wrapped: true };
    }
    return { script: new vm.Script(code, { filename }), wrapped: false };
  }

  async function runCell(req) {
    const id = req.id;
    const saved = {};
    for (const [k, v] of Object.entries(req.env || {})) {
      saved[k] = Object.prototype.hasOwnProperty.call(env, k) ? env[k] : undefined;
      env[k] = v;
    }
    st.cell = id;
    st.out = 0;
    st.truncated = false;
    let err = null;
    try {
      const { script, wrapped } = compile(String(req.code || ''), `cell-${id}`);
      let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
      if (wrapped) {
        const interrupted = new Promise((resolve, reject) => {
          st.interrupt = () => {
            const e = new Error('Script execution was interrupted by SIGINT');
            e.name = 'Interrupted';
            reject(e);
          };
        });
        value = (await Promise.race([value, interrupted]))?.value;
      }
      if (value !== undefined) {
        globalThis._ = value;
        showResult(value, true);
      }
    } catch (e) {
      err = errorOf(e);
      if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') err.name = 'Interrupted';
    } finally {
      st.interrupt = null;
    }
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete env[k];
      else env[k] = v;
    }
    if (err) send(Object.assign({ t: 'error', id }, err));
    const end = { t: 'end', id, truncated: st.truncated };
    st.cell = null;
    send(end);
    send(end, 2);
  }

  const queue = [];
  let busy = false;
  async function drain() {
    if (busy) return;
    busy = true;
    while (queue.length > 0) await runCell(queue.shift());
    busy = false;
  }
  let buf = '';
  cmdIn.setEncoding('utf8');
  cmdIn.on('data', (chunk) => {
    buf += chunk;
    let i;
    if (prefix === null) {
      if ((i = buf.indexOf('\n')) < 0) return;
      const nonce = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (!/^[0-9a-f]+$/.test(nonce)) process.exit(2);
      prefix = '\x1e' + nonce + ' ';
      send({ t: 'ready', lang: 'javascript', version: process.version, pid: process.pid });
    }
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      try {
        queue.push(JSON.parse(line));
      } catch (e) {
        continue;
      }
    }
    drain();
  });
  cmdIn.on('end', () => process.exit(0));
})();
