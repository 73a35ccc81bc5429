// The SDK against a real daemon (AIRLOCK_URL, AIRLOCK_API_KEY with the
// admin scope): sandboxes, exec, processes, files, code, errors,
// timeouts and a run with a caller-executed tool.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  Airlock,
  AirlockError,
  FailedPreconditionError,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  TimeoutError,
  UnauthenticatedError,
} from "../dist/index.js";

const airlock = new Airlock();
const noSkip = !!process.env.AIRLOCK_TEST_NO_SKIP;
let sb;

before(async () => {
  sb = await airlock.sandboxes.create({ metadata: { suite: "tssdk" }, limits: { memoryMb: 1024 }, timeoutS: 600 });
});

after(async () => {
  if (sb) await airlock.sandboxes.delete(sb.id);
});

/** Collects an async iterator's events. */
async function collect(it) {
  const evs = [];
  for await (const ev of it) evs.push(ev);
  return evs;
}

describe("sandboxes", () => {
  test("create, get, list, setTimeout, delete", async () => {
    const tag = `t${Date.now()}`;
    const s = await airlock.sandboxes.create({ metadata: { suite: "tssdk", tag }, env: { GREETING: "hello" }, timeoutS: 120 });
    try {
      assert.match(s.id, /\S/);
      assert.equal(s.state, "running");
      assert.equal(s.metadata.tag, tag);
      assert.ok(s.createdAt instanceof Date && !Number.isNaN(s.createdAt.getTime()));
      const got = await airlock.sandboxes.get(s.id);
      assert.equal(got.id, s.id);
      const listed = await airlock.sandboxes.list({ metadata: { tag } });
      assert.deepEqual(
        listed.map((x) => x.id),
        [s.id],
      );
      const all = await airlock.sandboxes.list({ states: ["running"] });
      assert.ok(all.some((x) => x.id === sb.id) && all.some((x) => x.id === s.id));
      const longer = await airlock.sandboxes.setTimeout(s.id, 300);
      assert.ok(longer.expiresAt > s.expiresAt, "setTimeout moved the expiry");
      const env = await airlock.exec(s.id, { command: "echo $GREETING" });
      assert.equal(env.stdout, "hello\n");
    } finally {
      await airlock.sandboxes.delete(s.id);
    }
    try {
      const ended = await airlock.sandboxes.get(s.id);
      assert.equal(ended.state, "stopped");
      assert.equal(ended.endReason, "deleted");
    } catch (err) {
      assert.ok(err instanceof NotFoundError, String(err));
    }
    const running = await airlock.sandboxes.list({ states: ["running"], metadata: { tag } });
    assert.equal(running.length, 0);
  });

  test("whoami", async () => {
    const me = await airlock.whoami();
    assert.match(me.keyId, /\S/);
    assert.ok(me.scopes.length > 0);
  });
});

describe("exec", () => {
  test("buffered: output, exit code, stdin, binary output", async () => {
    const r = await airlock.exec(sb.id, { command: "echo out; echo err >&2; exit 3" });
    assert.equal(r.status, "error");
    assert.equal(r.exitCode, 3);
    assert.equal(r.stdout, "out\n");
    assert.equal(r.stderr, "err\n");
    const cat = await airlock.exec(sb.id, { cmd: ["cat"], stdin: "piped" });
    assert.equal(cat.status, "success");
    assert.equal(cat.stdout, "piped");
    const bin = await airlock.exec(sb.id, { cmd: ["cat"], stdin: new Uint8Array([0xff, 0x00, 0xfe]) });
    assert.deepEqual([...bin.stdoutBytes], [0xff, 0x00, 0xfe]);
  });

  test("streamed: the pid first, output as it comes, then the exit", async () => {
    const evs = [];
    let listed;
    for await (const ev of airlock.execStream(sb.id, { command: "echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three" })) {
      evs.push(ev);
      if (ev.type === "start") listed = await airlock.processes.list(sb.id);
    }
    assert.equal(evs[0].type, "start");
    assert.ok(evs[0].pid > 0);
    assert.ok(
      listed.processes.some((p) => p.pid === evs[0].pid && p.startedByAgent),
      `pid ${evs[0].pid} is in the process list`,
    );
    const out = evs.filter((e) => e.type === "stdout").map((e) => e.text).join("");
    const err = evs.filter((e) => e.type === "stderr").map((e) => e.text).join("");
    assert.equal(out, "one\nthree\n");
    assert.equal(err, "two\n");
    // The chunks came apart, as they were written.
    assert.ok(evs.filter((e) => e.type === "stdout").length >= 2);
    const last = evs.at(-1);
    assert.equal(last.type, "exit");
    assert.equal(last.result.status, "success");
    assert.equal(last.result.exitCode, 0);
  });

  test("a background process: followed, fed stdin, signalled", async () => {
    let pid;
    for await (const ev of airlock.execStream(sb.id, { command: "while read l; do echo got $l; done", background: true, keepStdin: true, tag: "echoer" })) {
      if (ev.type === "start") {
        pid = ev.pid;
        break; // detaches; the process runs on in the background
      }
    }
    assert.ok(pid > 0);
    const list = await airlock.processes.list(sb.id);
    assert.ok(list.processes.some((p) => p.pid === pid && p.tag === "echoer" && p.background));

    const follow = airlock.processes.follow(sb.id, pid);
    const first = follow.next();
    // Output written before the follow is attached is not replayed: feed
    // lines until one comes back through it.
    const feed = setInterval(() => airlock.processes.sendStdin(sb.id, pid, "ping\n").catch(() => {}), 200);
    let ev;
    try {
      ev = (await first).value;
    } finally {
      clearInterval(feed);
    }
    assert.equal(ev.type, "stdout");
    assert.match(ev.text, /got ping/);
    await airlock.processes.signal(sb.id, pid, "TERM");
    let exit;
    for (;;) {
      const { value, done } = await follow.next();
      if (done) break;
      if (value.type === "exit") exit = value.result;
    }
    assert.ok(exit, "the follow ended with the exit");
    assert.ok(["killed", "error"].includes(exit.status), exit.status);
    assert.equal(exit.signal, 15);
  });
});

describe("files", () => {
  test("write, read, stat, list, mkdir, move, remove", async () => {
    const dir = await airlock.files.mkdir(sb.id, "work/sub");
    assert.equal(dir.type, "dir");
    const w = await airlock.files.write(sb.id, "work/sub/a.txt", "hello files");
    assert.equal(w.size, 11);
    assert.match(w.sha256, /^[0-9a-f]{64}$/);
    assert.equal(await airlock.files.readText(sb.id, "work/sub/a.txt"), "hello files");
    const st = await airlock.files.stat(sb.id, "work/sub/a.txt");
    assert.equal(st.type, "file");
    assert.equal(st.size, 11);
    const moved = await airlock.files.move(sb.id, "work/sub/a.txt", "work/b.txt");
    assert.equal(moved.name, "b.txt");
    const { entries } = await airlock.files.list(sb.id, "work");
    assert.deepEqual(entries.map((e) => e.name).sort(), ["b.txt", "sub"]);
    const deep = await airlock.files.list(sb.id, "work", { depth: 2 });
    assert.ok(deep.entries.length >= 2);
    // An async iterable (a Node Readable is one) is streamed too.
    async function* parts() {
      yield "a,";
      yield new Uint8Array([0x62, 0x2c]);
      yield Buffer.from("c");
    }
    await airlock.files.write(sb.id, "work/parts.txt", parts());
    assert.equal(await airlock.files.readText(sb.id, "work/parts.txt"), "a,b,c");
    await airlock.files.remove(sb.id, "work", { recursive: true });
    await assert.rejects(airlock.files.stat(sb.id, "work/b.txt"), NotFoundError);
  });

  test("watch yields start, then the changes", async () => {
    await airlock.files.mkdir(sb.id, "watched");
    const ctl = new AbortController();
    const seen = [];
    const it = airlock.files.watch(sb.id, "watched", { signal: ctl.signal });
    const first = await it.next();
    assert.deepEqual(first.value, { type: "start" });
    await airlock.files.write(sb.id, "watched/new.txt", "x");
    for (;;) {
      const { value, done } = await it.next();
      if (done) break;
      seen.push(value);
      if (value.path.endsWith("/watched/new.txt")) break;
    }
    await it.return();
    assert.ok(seen.some((e) => e.type === "event" && e.path.endsWith("/watched/new.txt")), JSON.stringify(seen));
  });
});

describe("code", () => {
  test("a context keeps state across cells; a streamed cell", async () => {
    const ctx = await airlock.code.contexts.create(sb.id, { language: "python" });
    assert.equal(ctx.language, "python");
    const a = await airlock.code.run(sb.id, { contextId: ctx.id, code: "x = 41\nprint('set')" });
    assert.equal(a.status, "ok");
    assert.equal(a.stdout, "set\n");
    const b = await airlock.code.run(sb.id, { contextId: ctx.id, code: "x + 1" });
    assert.equal(b.mainResult?.text, "42");
    assert.equal(b.executionCount, 2);
    const err = await airlock.code.run(sb.id, { contextId: ctx.id, code: "1/0" });
    assert.equal(err.status, "error");
    assert.equal(err.error?.name, "ZeroDivisionError");

    const evs = await collect(airlock.code.runStream(sb.id, { contextId: ctx.id, code: "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.1)\nx * 2" }));
    assert.deepEqual(
      evs.filter((e) => e.type === "stdout").map((e) => e.data).join(""),
      "0\n1\n2\n",
    );
    assert.equal(evs.find((e) => e.type === "result")?.result.text, "82");
    const end = evs.at(-1);
    assert.equal(end.type, "end");
    assert.equal(end.execution.status, "ok");
    assert.equal(end.execution.mainResult?.text, "82");

    const listed = await airlock.code.contexts.list(sb.id);
    assert.ok(listed.some((c) => c.id === ctx.id));
    await airlock.code.contexts.delete(sb.id, ctx.id);
  });

  test("a matplotlib chart comes back as PNG bytes", async (t) => {
    const has = await airlock.exec(sb.id, { cmd: ["python3", "-c", "import matplotlib"] });
    if (has.status !== "success") {
      if (noSkip) assert.fail("matplotlib is not in the sandbox (apt-get install python3-matplotlib)");
      t.skip("matplotlib is not in the sandbox");
      return;
    }
    const x = await airlock.code.run(sb.id, {
      language: "python",
      code: "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(4, 3), dpi=100)\nax.plot([3, 1, 2])\nplt.show()",
    });
    assert.equal(x.status, "ok", JSON.stringify(x.error));
    const png = x.results.find((r) => r.png)?.png;
    assert.ok(png instanceof Uint8Array, "a result with png bytes");
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    // The IHDR chunk says 400 x 300.
    const dv = new DataView(png.buffer, png.byteOffset, png.byteLength);
    assert.deepEqual([dv.getUint32(16), dv.getUint32(20)], [400, 300]);
  });
});

describe("errors", () => {
  test("a missing sandbox is NotFoundError", async () => {
    const err = await airlock.sandboxes.get("sb-aaaaaaaaaaaaaaaa").catch((e) => e);
    assert.ok(err instanceof NotFoundError, String(err));
    assert.ok(err instanceof AirlockError);
    assert.equal(err.status, 404);
    assert.equal(err.code, "not_found");
    await assert.rejects(airlock.exec("sb-aaaaaaaaaaaaaaaa", { command: "true" }), NotFoundError);
  });

  test("a bad request is InvalidArgumentError", async () => {
    const err = await airlock.sandboxes.create({ timeoutS: 10 ** 9 }).catch((e) => e);
    assert.ok(err instanceof InvalidArgumentError, String(err));
    assert.equal(err.status, 400);
    assert.equal(err.code, "invalid_argument");
    const bad = await airlock.exec(sb.id, { command: "true", user: "nobody-such" }).catch((e) => e);
    assert.ok(bad instanceof InvalidArgumentError, String(bad));
    // Found before any request is sent.
    await assert.rejects(airlock.exec(sb.id, { cmd: ["true"], command: "true" }), InvalidArgumentError);
  });

  test("a key without the scope is PermissionDeniedError; a bad key UnauthenticatedError", async () => {
    const key = await airlock.keys.create({ name: "tssdk-readonly", scopes: ["sandboxes:read"] });
    try {
      const limited = new Airlock({ apiKey: key.secret });
      assert.deepEqual((await limited.whoami()).scopes, ["sandboxes:read"]);
      await limited.sandboxes.get(sb.id); // what it may do
      const err = await limited.sandboxes.create().catch((e) => e);
      assert.ok(err instanceof PermissionDeniedError, String(err));
      assert.equal(err.status, 403);
      assert.equal(err.code, "permission_denied");
      await assert.rejects(limited.exec(sb.id, { command: "true" }), PermissionDeniedError);
    } finally {
      await airlock.keys.revoke(key.id);
    }
    const bad = new Airlock({ apiKey: "not-a-key" });
    await assert.rejects(bad.whoami(), UnauthenticatedError);
  });
});

describe("timeouts", () => {
  test("an exec killed by its timeout has status timeout", async () => {
    const t0 = Date.now();
    const r = await airlock.exec(sb.id, { command: "sleep 30", timeoutS: 1 });
    assert.equal(r.status, "timeout");
    assert.ok(Date.now() - t0 < 15_000);
  });

  test("a call past its timeoutMs rejects with TimeoutError", async () => {
    const t0 = Date.now();
    const err = await airlock.exec(sb.id, { command: "sleep 5" }, { timeoutMs: 300 }).catch((e) => e);
    assert.ok(err instanceof TimeoutError, String(err));
    assert.equal(err.clientSide, true);
    assert.ok(Date.now() - t0 < 3000);
    // A stream too, midway.
    const evs = [];
    const err2 = await (async () => {
      for await (const ev of airlock.execStream(sb.id, { command: "echo started; sleep 5" }, { timeoutMs: 800 })) evs.push(ev);
    })().catch((e) => e);
    assert.ok(err2 instanceof TimeoutError, String(err2));
    assert.equal(evs[0]?.type, "start");
  });

  test("an AbortSignal aborts a call", async () => {
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(), 200);
    const err = await airlock.exec(sb.id, { command: "sleep 5" }, { signal: ctl.signal }).catch((e) => e);
    assert.equal(err?.name, "AbortError", String(err));
    // An already-aborted signal sends nothing.
    await assert.rejects(airlock.whoami({ signal: AbortSignal.abort() }), { name: "AbortError" });
    // The sandbox still serves.
    assert.equal((await airlock.exec(sb.id, { command: "echo ok" })).stdout, "ok\n");
  });
});

describe("run", () => {
  test("a program calls a caller-executed tool that the SDK answers", async () => {
    const name = `tssdk_add_${Date.now()}`;
    await airlock.tools.create({
      name,
      description: "Adds two numbers.",
      input_schema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
      upstream: { kind: "caller" },
    });
    try {
      assert.ok((await airlock.tools.list()).some((t) => t.name === name));
      const calls = [];
      const res = await airlock.runOnce(
        {
          language: "python",
          code: `from tools import ${name}\nprint(${name}(a=2, b=40)["sum"])\ntry:\n    ${name}(a=1, b=-1)\nexcept Exception as e:\n    print("failed:", e)`,
          tools: [name],
          timeoutS: 60,
        },
        {
          tools: {
            [name]: async ({ a, b }) => {
              calls.push([a, b]);
              if (a + b === 0) throw new Error("zero is not allowed");
              return { sum: a + b };
            },
          },
        },
      );
      assert.equal(res.exitCode, 0, res.stderr);
      assert.match(res.stdout, /^42\n/);
      assert.match(res.stdout, /zero is not allowed/);
      assert.deepEqual(calls, [
        [2, 40],
        [1, -1],
      ]);
      assert.equal(res.toolCalls.length, 2);
      assert.match(res.sandboxId, /\S/);
    } finally {
      await airlock.tools.delete(name);
    }
  });
});

describe("stats", () => {
  test("a sample, a stream of samples, and their errors", async () => {
    let pid;
    for await (const ev of airlock.execStream(sb.id, { cmd: ["sh", "-c", "while :; do :; done"], background: true, timeoutS: 20, tag: "busy" })) {
      if (ev.type === "start") {
        pid = ev.pid;
        break;
      }
    }
    assert.ok(pid > 0);
    try {
      const s = await airlock.sandboxes.stats(sb.id, { intervalMs: 500 });
      assert.equal(s.sandboxId, sb.id);
      assert.ok(s.time instanceof Date && !Number.isNaN(s.time.getTime()));
      assert.ok(s.intervalMs >= 450 && s.intervalMs < 5000, String(s.intervalMs));
      assert.ok(s.cpu.rate > 0.3, `cpu.rate ${s.cpu.rate} with a busy loop`);
      assert.ok(s.cpu.usageS > 0 && s.cpu.limit > 0, JSON.stringify(s.cpu));
      assert.ok(s.memory.currentBytes > 0 && s.memory.peakBytes >= s.memory.currentBytes && s.memory.limitBytes > 0, JSON.stringify(s.memory));
      assert.equal(typeof s.memory.oomKills, "number");
      assert.ok(s.pids.current >= 2 && s.pids.limit > 0, JSON.stringify(s.pids));
      assert.equal(typeof s.disk.usedBytes, "number");
      assert.equal(s.network, undefined); // mode none
      assert.match(s.networkAbsent, /no network/);

      // A stream: three samples 200 ms apart, then leaving the loop ends it.
      const t0 = Date.now();
      const samples = [];
      for await (const x of airlock.sandboxes.streamStats(sb.id, { intervalMs: 200 })) {
        samples.push(x);
        if (samples.length === 3) break;
      }
      assert.equal(samples.length, 3);
      assert.ok(Date.now() - t0 < 3000, `three samples took ${Date.now() - t0} ms`);
      for (const x of samples) {
        assert.equal(x.sandboxId, sb.id);
        assert.ok(x.intervalMs >= 150 && x.intervalMs < 2000, String(x.intervalMs));
        assert.ok(x.memory.currentBytes > 0 && x.pids.current > 0);
      }
      assert.ok(samples[0].time < samples[1].time && samples[1].time < samples[2].time);
      assert.ok(samples[2].cpu.usageS > samples[0].cpu.usageS);

      // An AbortSignal ends a stream midway.
      const ctl = new AbortController();
      const got = [];
      const err = await (async () => {
        for await (const x of airlock.sandboxes.streamStats(sb.id, { intervalMs: 200, signal: ctl.signal })) {
          got.push(x);
          ctl.abort();
        }
      })().catch((e) => e);
      assert.equal(err?.name, "AbortError", String(err));
      assert.equal(got.length, 1);
    } finally {
      await airlock.processes.signal(sb.id, pid, "KILL").catch(() => {});
    }

    const missing = await airlock.sandboxes.stats("sb-aaaaaaaaaaaaaaaa", { intervalMs: 100 }).catch((e) => e);
    assert.ok(missing instanceof NotFoundError, String(missing));
    assert.equal(missing.status, 404);
    await assert.rejects(collect(airlock.sandboxes.streamStats("sb-aaaaaaaaaaaaaaaa")), NotFoundError);
    // Found before any request is sent.
    for (const intervalMs of [5, 1.5, 60_001]) {
      await assert.rejects(airlock.sandboxes.stats(sb.id, { intervalMs }), InvalidArgumentError);
      await assert.rejects(collect(airlock.sandboxes.streamStats(sb.id, { intervalMs })), InvalidArgumentError);
    }
  });

  test("a stream ends when its sandbox ends", async () => {
    const s = await airlock.sandboxes.create({ metadata: { suite: "tssdk" }, timeoutS: 120 });
    let deleted = false;
    try {
      const it = airlock.sandboxes.streamStats(s.id, { intervalMs: 200 });
      const first = await it.next();
      assert.equal(first.value?.sandboxId, s.id);
      await airlock.sandboxes.delete(s.id);
      deleted = true;
      const rest = await collect(it); // ends without an error
      assert.ok(rest.length <= 15, String(rest.length));
      // A sandbox that ended has no stats (or, once forgotten, no sandbox).
      const ended = await airlock.sandboxes.stats(s.id, { intervalMs: 100 }).catch((e) => e);
      assert.ok(ended instanceof FailedPreconditionError || ended instanceof NotFoundError, String(ended));
    } finally {
      if (!deleted) await airlock.sandboxes.delete(s.id);
    }
  });
});
