// Runs the real e2b SDK against a server that speaks E2B's API (for Airlock:
// its E2B edge). Environment: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY
// (required); E2B_TEMPLATE (optional, else the SDK's default "base").
// Each step prints "ok <step>" or "FAIL <step>: <error>"; the first failure
// kills what was created and exits 1.
import { randomBytes } from 'node:crypto';
import { Sandbox, CommandExitError, NotFoundError, SandboxNotFoundError } from 'e2b';
import { requireEnv, onFailure, step, check, eq, expectReject, sleep, Skip } from './harness.mjs';

requireEnv();

const run = randomBytes(6).toString('hex');
const metadata = { suite: 'airlock-sdktest', run };
const template = process.env.E2B_TEMPLATE || undefined;
const dir = `/tmp/sdktest-${run}`;
const opts = (extra) => ({ metadata, ...extra, timeoutMs: 120_000 });

let sbx;
const extra = [];
onFailure(async () => {
  for (const s of [sbx, ...extra]) if (s) await s.kill().catch(() => {});
});

await step('create', async () => {
  const o = opts({ envs: { SDKTEST_GLOBAL: 'global-value' } });
  sbx = template ? await Sandbox.create(template, o) : await Sandbox.create(o);
  check(/^[a-z0-9]+$/.test(sbx.sandboxId), `sandboxId ${JSON.stringify(sbx.sandboxId)} is not [a-z0-9]+`);
});

await step('create-envs', async () => {
  const r = await sbx.commands.run('printf %s "$SDKTEST_GLOBAL"');
  eq(r.stdout, 'global-value', 'env var from Sandbox.create');
});

await step('run-echo', async () => {
  const r = await sbx.commands.run('echo hi');
  eq(r.stdout, 'hi\n', 'stdout');
  eq(r.stderr, '', 'stderr');
  eq(r.exitCode, 0, 'exitCode');
});

await step('run-stderr', async () => {
  const r = await sbx.commands.run('echo oops >&2');
  eq(r.stderr, 'oops\n', 'stderr');
  eq(r.stdout, '', 'stdout');
});

await step('run-exit-code', async () => {
  const err = await expectReject(() => sbx.commands.run('echo out; echo err >&2; exit 3'), 'exit 3');
  check(err instanceof CommandExitError, `got ${err?.name}: ${err?.message}, want CommandExitError`);
  eq(err.exitCode, 3, 'exitCode');
  eq(err.stdout, 'out\n', 'stdout');
  eq(err.stderr, 'err\n', 'stderr');
});

await step('run-env', async () => {
  const r = await sbx.commands.run('printf %s "$FOO"', { envs: { FOO: 'bar baz' } });
  eq(r.stdout, 'bar baz', 'stdout');
});

await step('run-cwd', async () => {
  const r = await sbx.commands.run('pwd', { cwd: '/tmp' });
  eq(r.stdout, '/tmp\n', 'stdout');
});

await step('run-callbacks', async () => {
  const out = [];
  const errs = [];
  await sbx.commands.run('echo a; sleep 0.2; echo b; echo c >&2', {
    onStdout: (d) => out.push(d),
    onStderr: (d) => errs.push(d),
  });
  eq(out.join(''), 'a\nb\n', 'onStdout data');
  eq(errs.join(''), 'c\n', 'onStderr data');
});

await step('background-kill', async () => {
  const h = await sbx.commands.run('sleep 600', { background: true });
  check(h.pid > 0, `pid ${h.pid}`);
  const listed = await sbx.commands.list();
  check(listed.some((p) => p.pid === h.pid), `commands.list has no pid ${h.pid}: ${JSON.stringify(listed)}`);
  eq(await h.kill(), true, 'kill()');
  const err = await expectReject(() => h.wait(), 'wait after kill');
  check(err instanceof CommandExitError, `wait: got ${err?.name}: ${err?.message}, want CommandExitError`);
  for (let i = 0; ; i++) {
    const after = await sbx.commands.list();
    if (!after.some((p) => p.pid === h.pid)) break;
    check(i < 50, `pid ${h.pid} still listed after kill`);
    await sleep(100);
  }
  eq(await sbx.commands.kill(h.pid), false, 'kill of a gone pid');
});

await step('background-stdin', async () => {
  const h = await sbx.commands.run('head -n 1', { background: true, stdin: true });
  await h.sendStdin('hello stdin\n');
  const r = await h.wait();
  eq(r.stdout, 'hello stdin\n', 'stdout');
});

await step('close-stdin', async () => {
  if (!sbx.commands.supportsStdinClose) throw new Skip(`envdVersion ${sbx.commands.envdVersion} is below 0.5.2`);
  const h = await sbx.commands.run('cat', { background: true, stdin: true });
  await h.sendStdin('to eof');
  await h.closeStdin();
  const r = await h.wait();
  eq(r.stdout, 'to eof', 'stdout');
});

await step('commands-connect', async () => {
  const h = await sbx.commands.run('sleep 1; echo later', { background: true });
  await h.disconnect();
  const again = await sbx.commands.connect(h.pid);
  eq(again.pid, h.pid, 'pid');
  const r = await again.wait();
  eq(r.stdout, 'later\n', 'stdout after connect');
});

const binary = new Uint8Array(256);
for (let i = 0; i < binary.length; i++) binary[i] = i;

await step('pty', async () => {
  let out = '';
  const dec = new TextDecoder();
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d); }, timeoutMs: 60_000 });
  check(term.pid > 0, `pid ${term.pid}`);
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo pty-$((40+2)); stty size\n'));
  for (let i = 0; !out.includes('pty-42') || !out.includes('24 80'); i++) {
    check(i < 100, `no echo from the terminal: ${JSON.stringify(out.slice(-400))}`);
    await sleep(100);
  }
  await sbx.pty.resize(term.pid, { cols: 100, rows: 30 });
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; exit 7\n'));
  const r = await term.wait().catch((e) => e);
  check(out.includes('30 100'), `the resize did not reach the terminal: ${JSON.stringify(out.slice(-400))}`);
  eq(r.exitCode, 7, 'exit code of the shell');
});

await step('files-write-text', async () => {
  const info = await sbx.files.write(`${dir}/a.txt`, 'hello text');
  eq(info.path, `${dir}/a.txt`, 'path');
  eq(info.name, 'a.txt', 'name');
  eq(await sbx.files.read(`${dir}/a.txt`), 'hello text', 'read back');
});

await step('files-write-binary', async () => {
  await sbx.files.write(`${dir}/b.bin`, binary);
  const got = await sbx.files.read(`${dir}/b.bin`, { format: 'bytes' });
  check(got instanceof Uint8Array, `read bytes: got ${Object.prototype.toString.call(got)}`);
  eq(got.length, binary.length, 'length');
  check(got.every((v, i) => v === binary[i]), 'bytes differ');
});

await step('files-write-gzip', async () => {
  // envd 0.5.7: an octet-stream body, gzip-compressed by the SDK.
  const text = 'compressed '.repeat(1000);
  await sbx.files.write(`${dir}/z.txt`, text, { gzip: true });
  eq(await sbx.files.read(`${dir}/z.txt`), text, 'read back');
  await sbx.files.write(`${dir}/o.bin`, binary, { useOctetStream: true });
  const got = await sbx.files.read(`${dir}/o.bin`, { format: 'bytes' });
  check(got.length === binary.length && got.every((v, i) => v === binary[i]), 'octet-stream bytes differ');
});

await step('files-write-empty', async () => {
  await sbx.files.write(`${dir}/empty`, '');
  eq(await sbx.files.read(`${dir}/empty`), '', 'read back');
});

await step('files-read-missing', async () => {
  const err = await expectReject(() => sbx.files.read(`${dir}/missing`), 'read of a missing file');
  check(err instanceof NotFoundError, `got ${err?.name}: ${err?.message}, want NotFoundError`);
});

await step('files-list', async () => {
  const entries = await sbx.files.list(dir);
  const byName = Object.fromEntries(entries.map((e) => [e.name, e]));
  check(byName['a.txt'], `no a.txt in ${JSON.stringify(entries.map((e) => e.name))}`);
  eq(byName['a.txt'].type, 'file', 'a.txt type');
  eq(byName['a.txt'].path, `${dir}/a.txt`, 'a.txt path');
  eq(byName['b.bin'].size, 256, 'b.bin size');
});

await step('files-exists', async () => {
  eq(await sbx.files.exists(`${dir}/a.txt`), true, 'exists a.txt');
  eq(await sbx.files.exists(`${dir}/nope`), false, 'exists nope');
});

await step('files-makeDir', async () => {
  eq(await sbx.files.makeDir(`${dir}/d1/d2`), true, 'first makeDir');
  eq(await sbx.files.makeDir(`${dir}/d1/d2`), false, 'second makeDir');
  const info = await sbx.files.getInfo(`${dir}/d1/d2`);
  eq(info.type, 'dir', 'type');
});

await step('files-rename', async () => {
  const info = await sbx.files.rename(`${dir}/a.txt`, `${dir}/d1/c.txt`);
  eq(info.path, `${dir}/d1/c.txt`, 'new path');
  eq(await sbx.files.exists(`${dir}/a.txt`), false, 'old path exists');
  eq(await sbx.files.read(`${dir}/d1/c.txt`), 'hello text', 'content after rename');
});

await step('files-getInfo', async () => {
  const info = await sbx.files.getInfo(`${dir}/d1/c.txt`);
  eq(info.name, 'c.txt', 'name');
  eq(info.type, 'file', 'type');
  eq(info.size, 10, 'size');
  check(info.modifiedTime instanceof Date && !Number.isNaN(info.modifiedTime.getTime()), `modifiedTime ${info.modifiedTime}`);
  check(Math.abs(Date.now() - info.modifiedTime.getTime()) < 10 * 60_000, `modifiedTime ${info.modifiedTime.toISOString()} is not recent`);
  check(typeof info.permissions === 'string' && info.permissions.length === 10, `permissions ${info.permissions}`);
  const err = await expectReject(() => sbx.files.getInfo(`${dir}/nope`), 'getInfo of a missing path');
  check(err instanceof NotFoundError, `got ${err?.name}: ${err?.message}, want NotFoundError`);
});

await step('files-watchDir', async () => {
  const events = [];
  const w = await sbx.files.watchDir(dir, (e) => events.push(e));
  try {
    await sbx.files.write(`${dir}/watched.txt`, 'x');
    for (let i = 0; !events.some((e) => e.name === 'watched.txt'); i++) {
      check(i < 100, `no event for watched.txt: ${JSON.stringify(events)}`);
      await sleep(100);
    }
  } finally {
    await w.stop();
  }
});

await step('files-remove', async () => {
  await sbx.files.remove(`${dir}/d1`);
  eq(await sbx.files.exists(`${dir}/d1`), false, 'exists after remove');
  eq(await sbx.files.exists(`${dir}/d1/c.txt`), false, 'child exists after remove');
});

await step('getHost', async () => {
  // getHost is {port}-{id}.{domain}: it needs the server's wildcard
  // domain (SDKTEST_HOST_ROUTING=1 says the daemon has one). The request
  // goes to E2B_SANDBOX_URL's address with that Host, as a DNS entry for
  // *.domain would send it, and carries the traffic token: sandbox ports
  // are not public.
  if (!process.env.SDKTEST_HOST_ROUTING) throw new Skip('the server has no wildcard domain (SDKTEST_HOST_ROUTING unset)');
  await sbx.files.write('/tmp/www/hello.txt', 'hello from the sandbox');
  const server = await sbx.commands.run('cd /tmp/www && exec python3 -m http.server 8000', { background: true, timeoutMs: 0 });
  const host = sbx.getHost(8000);
  check(host.startsWith(`8000-${sbx.sandboxId}.`), `getHost(8000) = ${host}`);
  const { request } = await import('node:http');
  const base = new URL(process.env.E2B_SANDBOX_URL);
  const get = () => new Promise((resolve, reject) => {
    const req = request({ host: base.hostname, port: base.port, path: '/hello.txt', headers: { Host: host, 'e2b-traffic-access-token': sbx.trafficAccessToken ?? '' } }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.end();
  });
  let got;
  for (let i = 0; i < 50; i++) {
    got = await get();
    if (got.status === 200) break;
    await sleep(100);
  }
  eq(got.status, 200, `status (body ${JSON.stringify(got.body).slice(0, 200)})`);
  eq(got.body, 'hello from the sandbox', 'body');
  await server.kill();
});

await step('setTimeout', async () => {
  await sbx.setTimeout(600_000);
  const info = await sbx.getInfo();
  const left = info.endAt.getTime() - Date.now();
  check(left > 500_000 && left <= 610_000, `endAt ${info.endAt.toISOString()} is ${left} ms away, want about 600 s`);
});

await step('list', async () => {
  const pager = Sandbox.list({ query: { metadata: { run } } });
  const found = [];
  while (pager.hasNext) found.push(...(await pager.nextItems()));
  const me = found.find((s) => s.sandboxId === sbx.sandboxId);
  check(me, `Sandbox.list has no ${sbx.sandboxId}: ${JSON.stringify(found.map((s) => s.sandboxId))}`);
  eq(me.metadata.suite, 'airlock-sdktest', 'metadata.suite');
  eq(me.metadata.run, run, 'metadata.run');
  eq(me.state, 'running', 'state');
});

await step('list-paging', async () => {
  const second = template ? await Sandbox.create(template, opts({})) : await Sandbox.create(opts({}));
  extra.push(second);
  const pager = Sandbox.list({ query: { metadata: { run } }, limit: 1 });
  const pages = [];
  while (pager.hasNext) {
    const page = await pager.nextItems();
    check(page.length <= 1, `page of ${page.length} with limit 1`);
    if (page.length > 0) pages.push(page[0].sandboxId);
    check(pages.length <= 5, `too many pages: ${JSON.stringify(pages)}`);
  }
  const want = [sbx.sandboxId, second.sandboxId].sort();
  eq(JSON.stringify([...pages].sort()), JSON.stringify(want), 'ids over the pages');
  eq(await second.kill(), true, 'kill of the second sandbox');
});

await step('connect', async () => {
  const again = await Sandbox.connect(sbx.sandboxId);
  eq(again.sandboxId, sbx.sandboxId, 'sandboxId');
  const r = await again.commands.run('echo connected');
  eq(r.stdout, 'connected\n', 'stdout');
  eq(await again.isRunning(), true, 'isRunning');
});

await step('kill', async () => {
  eq(await sbx.kill(), true, 'kill()');
});

await step('after-kill', async () => {
  eq(await sbx.kill(), false, 'second kill()');
  const err = await expectReject(() => Sandbox.connect(sbx.sandboxId), 'connect after kill');
  check(err instanceof SandboxNotFoundError, `connect: got ${err?.name}: ${err?.message}, want SandboxNotFoundError`);
  const err2 = await expectReject(() => sbx.setTimeout(60_000), 'setTimeout after kill');
  check(err2 instanceof SandboxNotFoundError, `setTimeout: got ${err2?.name}: ${err2?.message}, want SandboxNotFoundError`);
  const err3 = await expectReject(() => sbx.commands.run('true'), 'commands.run after kill');
  check(err3 instanceof Error, `commands.run: ${err3}`);
  console.log(`  (commands.run after kill: ${err3.name}: ${err3.message.split('\n')[0]})`);
  sbx = undefined;
});

console.log('PASS basic');
