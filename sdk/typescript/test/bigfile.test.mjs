// A 100 MB file up and down through the SDK without holding it whole:
// the upload is a ReadableStream that generates its chunks, the download
// is hashed as it streams, and this process's peak RSS grows by well
// below the file's size. Run against a real daemon (AIRLOCK_URL,
// AIRLOCK_API_KEY).
//
// V8 frees the memory of dropped ArrayBuffers lazily (it lets up to
// 64 MiB of them pile up before it collects), so the test collects every
// 8 MiB: what RSS and the live ArrayBuffers measure then is what the SDK
// (and fetch under it) holds, not what V8 has yet to collect.

import { readFileSync } from "node:fs";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc");
let liveMax = 0; // the most ArrayBuffer bytes alive after a collection
function collect() {
  gc();
  liveMax = Math.max(liveMax, process.memoryUsage().arrayBuffers);
}

import { Airlock } from "../dist/index.js";

const size = 100 * 1000 * 1000; // 100 MB
const chunkSize = 256 << 10;
const airlock = new Airlock();
let sb;

before(async () => {
  sb = await airlock.sandboxes.create({ metadata: { suite: "tssdk-bigfile" }, limits: { diskMb: 1024 }, timeoutS: 600 });
});

after(async () => {
  if (sb) await airlock.sandboxes.delete(sb.id);
});

/** A stream of `size` bytes, each chunk made when asked for, hashed into h. */
function generated(h) {
  let sent = 0;
  let n = 0;
  return new ReadableStream(
    {
      pull(c) {
        if (sent >= size) {
          c.close();
          return;
        }
        const len = Math.min(chunkSize, size - sent);
        const chunk = new Uint8Array(len);
        // Different bytes in every chunk, so that a chunk lost, repeated
        // or reordered changes the hash.
        for (let i = 0; i < len; i += 4) chunk[i] = (n + i) & 0xff;
        chunk[0] = n & 0xff;
        chunk[1] = (n >> 8) & 0xff;
        n++;
        sent += len;
        if (n % 32 === 0) collect();
        h.update(chunk);
        c.enqueue(chunk);
      },
    },
    { highWaterMark: 0 },
  );
}

// peakKiB is this process's peak RSS: VmHWM, the high-water mark of its
// own address space. resourceUsage().maxRSS would not do: Linux carries
// the parent's peak over an exec that shared its memory (the Go test
// binary's vfork), so it can start at gigabytes and hide any growth.
function peakKiB() {
  const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync("/proc/self/status", "utf8"));
  return m ? Number(m[1]) : process.resourceUsage().maxRSS;
}

test("a 100 MB file is uploaded and downloaded as streams", async () => {
  const rssBefore = peakKiB(); // KiB
  const up = createHash("sha256");
  const t0 = performance.now();
  const info = await airlock.files.write(sb.id, "big.bin", generated(up), { timeoutMs: 120_000 });
  const upMs = performance.now() - t0;
  const want = up.digest("hex");
  assert.equal(info.size, size);
  assert.equal(info.sha256, want, "the server's SHA-256 of what it received");

  // The sandbox's own view of the file.
  const res = await airlock.exec(sb.id, { command: "stat -c %s big.bin && sha256sum big.bin" });
  assert.equal(res.status, "success", res.stderr);
  const [gotSize, gotSum] = res.stdout.split(/\s+/);
  assert.equal(Number(gotSize), size);
  assert.equal(gotSum, want, "sha256sum in the sandbox");

  // Down, hashed while it streams.
  const down = createHash("sha256");
  let n = 0;
  const t1 = performance.now();
  const stream = await airlock.files.read(sb.id, "big.bin", { timeoutMs: 120_000 });
  let last = 0;
  for await (const chunk of stream) {
    n += chunk.byteLength;
    down.update(chunk);
    if (n - last >= 8 << 20) {
      last = n;
      collect();
    }
  }
  const downMs = performance.now() - t1;
  assert.equal(n, size);
  assert.equal(down.digest("hex"), want);

  const peakMiB = peakKiB() / 1024;
  const growMiB = peakMiB - rssBefore / 1024;
  console.log(
    `100 MB: up ${upMs.toFixed(0)} ms, down ${downMs.toFixed(0)} ms; peak RSS ${peakMiB.toFixed(1)} MiB, ${growMiB.toFixed(1)} MiB over the ${(rssBefore / 1024).toFixed(1)} MiB before; at most ${(liveMax / 1048576).toFixed(1)} MiB of ArrayBuffers alive`,
  );
  assert.ok(growMiB < 50, `peak RSS grew by ${growMiB.toFixed(1)} MiB: the file was held in memory`);
  assert.ok(liveMax < 32 << 20, `${(liveMax / 1048576).toFixed(1)} MiB of ArrayBuffers alive: the file was held in memory`);
});
