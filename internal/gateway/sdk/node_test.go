package sdk

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// jsPrelude starts every CommonJS script: the module as a sandbox's
// code requires it (NODE_PATH), and a main that prints "ok" when the
// script's body finishes.
const jsPrelude = `'use strict';
const assert = require('assert');
const tools = require('tools');
async function expectError(p, code) {
  try { await p; } catch (e) {
    assert.ok(e instanceof tools.ToolError, 'not a ToolError: ' + e);
    assert.strictEqual(e.code, code, e.message);
    return e;
  }
  assert.fail('no error, want ' + code);
}
async function main() {
`

const jsEnd = `
}
main().then(() => console.log('ok'), (e) => { console.error(e); process.exit(1); });
`

// TestNode runs node/tools.js (and tools.mjs), as WriteDir places them,
// with the real interpreter against the fake gateway.
func TestNode(t *testing.T) {
	node := requireInterpreter(t, "node")
	cases := []struct{ name, src string }{
		{"call", `
  assert.deepStrictEqual(await tools.call('echo', { text: 'hi', count: 2, meta: { k: null } }),
    { tool: 'echo', args: { text: 'hi', count: 2, meta: { k: null } } });
  assert.deepStrictEqual(await tools.call('sleep'), { slept: true });
  assert.deepStrictEqual(await tools.get('echo')({ text: 'g' }), { tool: 'echo', args: { text: 'g' } });
  assert.strictEqual(tools.get('echo').name, 'echo');
  await assert.rejects(() => tools.call('echo', [1]), TypeError);
  await assert.rejects(() => tools.call(''), TypeError);
`},
		{"errors", `
  const codes = CODES;
  for (const code of codes) {
    const e = await expectError(tools.call('fail', { code }), code);
    assert.strictEqual(e.detail, 'refused: ' + code);
    assert.strictEqual(e.message, code + ': refused: ' + code);
    assert.ok(e instanceof Error && e.name === 'ToolError');
  }
  const e = await expectError(tools.call('nope'), 'permission_denied');
  assert.match(e.detail, /not granted/);
  await expectError(tools.call('garbage'), 'internal');
  await expectError(tools.call('bare'), 'internal');
`},
		{"load", `
  assert.strictEqual(tools.echo, undefined, 'a tool function before load()');
  const t = await tools.load();
  assert.strictEqual(t, tools);
  assert.deepStrictEqual(await tools.echo({ text: 'p' }), { tool: 'echo', args: { text: 'p' } });
  assert.ok('echo' in tools && !('nope' in tools));
  assert.strictEqual(tools.nope, undefined);
  assert.strictEqual(tools.then, undefined);
  const names = (await tools.listTools()).map((x) => x.name);
  assert.deepStrictEqual(names.slice(0, 3), ['echo', 'sleep', 'fail']);
`},
		{"concurrent", `
  const start = Date.now();
  const results = await Promise.all(Array.from({ length: 100 }, () => tools.call('sleep')));
  const ms = Date.now() - start;
  assert.strictEqual(results.length, 100);
  assert.ok(results.every((r) => r.slept === true));
  // 100 calls of 100 ms in turn take 10 s.
  assert.ok(ms < 3000, 'took ' + ms + ' ms');
  console.log('promise.all ' + ms + ' ms');
`},
		{"dts", `
  const d = await tools.dts();
  for (const want of [
    '  echo(args: { text: string; count?: number; ratio?: number; flag?: boolean; tags?: string[]; meta?: Record<string, unknown>; level?: "low" | "high"; note?: string | null }, options?: CallOptions): Promise<{ tool: string; args?: Record<string, unknown>; [key: string]: unknown }>;',
    '  /** Echo the arguments back. */',
    '  fail(args: { code: string; [key: string]: unknown }, options?: CallOptions): Promise<unknown>;',
    '  sleep(args?: Record<string, unknown>, options?: CallOptions): Promise<unknown>;',
    'export interface GrantedTools {',
    'declare const tools: ToolsModule & GrantedTools;',
  ]) {
    assert.ok(d.split('\n').includes(want), 'd.ts lacks ' + want + ':\n' + d);
  }
`},
		{"timeout", `
  const start = Date.now();
  await expectError(tools.call('hang', {}, { timeoutMs: 300 }), 'timeout');
  assert.ok(Date.now() - start < 3000);
  process.env.AIRLOCK_TOOLS_TIMEOUT = '0.3';
  await expectError(tools.call('hang'), 'timeout');
`},
		{"limits", `
  const e = await expectError(tools.call('big'), 'resource_exhausted');
  assert.match(e.detail, /over 16777216 bytes/);
  assert.deepStrictEqual(await tools.call('echo', { text: 'after' }), { tool: 'echo', args: { text: 'after' } });
`},
		{"unreachable", `
  const net = require('net');
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const port = srv.address().port;
  await new Promise((r) => srv.close(r));
  process.env.AIRLOCK_TOOLS_URL = 'http://127.0.0.1:' + port;
  const e = await expectError(tools.call('echo', { text: 'x' }), 'unavailable');
  assert.match(e.detail, /cannot reach the tool gateway/);
  process.env.AIRLOCK_TOOLS_URL = 'https://127.0.0.1:1';
  await expectError(tools.call('echo', { text: 'x' }), 'internal');
`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newSDKEnv(t, 0)
			src := jsPrelude + strings.ReplaceAll(c.src, "CODES", codesJSON(t)) + jsEnd
			e.script(t, node, "case_"+c.name+".js", src)
			checkConcurrency(t, c.name, e.gw)
		})
	}

	// Connections are kept and reused, and the process still exits at
	// once when its work is done (kept sockets do not hold it).
	t.Run("reuse", func(t *testing.T) {
		e := newSDKEnv(t, 0)
		start := time.Now()
		e.script(t, node, "reuse.js", jsPrelude+`
  for (let i = 0; i < 50; i++) {
    assert.deepStrictEqual(await tools.call('echo', { text: String(i) }), { tool: 'echo', args: { text: String(i) } });
  }
`+jsEnd)
		if n := e.gw.conns.Load(); n != 1 {
			t.Errorf("50 calls in turn opened %d connections, want 1", n)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("node took %v to exit after its calls", d)
		}
	})

	// A kept connection the gateway closed while idle is not used.
	t.Run("idle close", func(t *testing.T) {
		e := newSDKEnv(t, 50*time.Millisecond)
		e.script(t, node, "idle.js", jsPrelude+`
  for (let i = 0; i < 5; i++) {
    assert.deepStrictEqual(await tools.call('echo', { text: String(i) }), { tool: 'echo', args: { text: String(i) } });
    await new Promise((r) => setTimeout(r, 200));
  }
`+jsEnd)
	})

	// An ES module imports it by path (ES modules ignore NODE_PATH).
	t.Run("esm", func(t *testing.T) {
		e := newSDKEnv(t, 0)
		mjs := filepath.ToSlash(filepath.Join(e.lib, "node", "tools.mjs"))
		e.script(t, node, "esm.mjs", `
import assert from 'node:assert';
import tools, { call, ToolError } from '`+mjs+`';
assert.deepStrictEqual(await call('echo', { text: 'm' }), { tool: 'echo', args: { text: 'm' } });
await tools.load();
assert.deepStrictEqual(await tools.echo({ text: 'n' }), { tool: 'echo', args: { text: 'n' } });
try { await call('fail', { code: 'permission_denied' }); assert.fail('no error'); } catch (e) {
  assert.ok(e instanceof ToolError && e.code === 'permission_denied');
}
console.log('ok');
`)
	})
}
