// Side by side, in one run: Sandbox.create → first commands.run through
// the real e2b SDK (E2B_API_URL / E2B_SANDBOX_URL: Airlock's E2B edge),
// and the same through Airlock's own API (AIRLOCK_URL, AIRLOCK_API_KEY)
// with plain fetch (the exec buffered, and streamed as the edge runs it),
// alternating, BENCH_N rounds each (default 30). The
// sandbox is killed after each round, outside the timing. Prints one JSON
// line: the p50 and p90 in ms of each path and the p50 difference.
import { Sandbox } from 'e2b';

const n = Number(process.env.BENCH_N || 30);
const api = process.env.AIRLOCK_URL;
const key = process.env.AIRLOCK_API_KEY;
if (!api || !key || !process.env.E2B_API_URL) {
  console.log('FAIL setup: AIRLOCK_URL, AIRLOCK_API_KEY and E2B_* are required');
  process.exit(2);
}
const auth = { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' };

async function airlock() {
  const t0 = performance.now();
  let r = await fetch(`${api}/v1/sandboxes`, { method: 'POST', headers: auth, body: '{}' });
  if (r.status !== 201) throw new Error(`create: ${r.status} ${await r.text()}`);
  const sb = await r.json();
  r = await fetch(`${api}/v1/sandboxes/${sb.id}/exec`, { method: 'POST', headers: auth, body: JSON.stringify({ cmd: ['/bin/bash', '-l', '-c', 'echo hi'] }) });
  const res = await r.json();
  const ms = performance.now() - t0;
  if (res.stdout !== 'hi\n') throw new Error(`exec: ${JSON.stringify(res)}`);
  await fetch(`${api}/v1/sandboxes/${sb.id}`, { method: 'DELETE', headers: auth });
  return ms;
}

// airlockStream is airlock() with the exec streamed (NDJSON), as the
// E2B edge runs commands.
async function airlockStream() {
  const t0 = performance.now();
  let r = await fetch(`${api}/v1/sandboxes`, { method: 'POST', headers: auth, body: '{}' });
  if (r.status !== 201) throw new Error(`create: ${r.status} ${await r.text()}`);
  const sb = await r.json();
  r = await fetch(`${api}/v1/sandboxes/${sb.id}/exec`, { method: 'POST', headers: { ...auth, Accept: 'application/x-ndjson' }, body: JSON.stringify({ cmd: ['/bin/bash', '-l', '-c', 'echo hi'] }) });
  const text = await r.text();
  const ms = performance.now() - t0;
  if (!text.includes('"data":"hi\\n"') || !text.includes('"type":"exit"')) throw new Error(`exec stream: ${text}`);
  await fetch(`${api}/v1/sandboxes/${sb.id}`, { method: 'DELETE', headers: auth });
  return ms;
}

async function e2b() {
  const t0 = performance.now();
  const sbx = await Sandbox.create();
  const r = await sbx.commands.run('echo hi');
  const ms = performance.now() - t0;
  if (r.stdout !== 'hi\n') throw new Error(`run: ${JSON.stringify(r)}`);
  await sbx.kill();
  return ms;
}

const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const a = [], b = [], c = [];
await airlock(); await airlockStream(); await e2b(); // warm every path (connections, code)
for (let i = 0; i < n; i++) {
  a.push(await airlock());
  c.push(await airlockStream());
  b.push(await e2b());
}
const out = {
  n,
  airlock_p50_ms: +pct(a, 0.5).toFixed(2), airlock_p90_ms: +pct(a, 0.9).toFixed(2),
  airlock_stream_p50_ms: +pct(c, 0.5).toFixed(2), airlock_stream_p90_ms: +pct(c, 0.9).toFixed(2),
  e2b_p50_ms: +pct(b, 0.5).toFixed(2), e2b_p90_ms: +pct(b, 0.9).toFixed(2),
};
out.e2b_adds_p50_ms = +(out.e2b_p50_ms - out.airlock_p50_ms).toFixed(2);
console.log(JSON.stringify(out));
