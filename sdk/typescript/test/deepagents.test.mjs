// The deepagents backend against a real daemon (AIRLOCK_URL,
// AIRLOCK_API_KEY): the real deepagents agent loop (createDeepAgent)
// driven by a scripted chat model, whose tool calls the backend carries
// out in a sandbox, and the backend's operations one by one.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cp, mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage } from "@langchain/core/messages";
import { BaseSandbox, CompositeBackend, StateBackend, createDeepAgent } from "deepagents";

import { Airlock, AirlockSandbox, InvalidArgumentError, NotFoundError, PermissionDeniedError } from "../dist/index.js";

const airlock = new Airlock();
let backend;
let home;

before(async () => {
  // create loads BaseSandbox with import("deepagents").
  backend = await AirlockSandbox.create(airlock, { metadata: { suite: "tssdk-deepagents" }, limits: { memoryMb: 512 }, timeoutS: 600 });
  home = (await airlock.exec(backend.id, { command: 'printf %s "$HOME"' })).stdout;
  assert.match(home, /^\/\S+$/);
});

after(async () => {
  await backend?.close();
});

/**
 * A chat model that answers with the next of its turns: each turn is a
 * function of the conversation so far that returns an AIMessage (with
 * tool_calls, or the final answer). No model API is called.
 */
class ScriptedModel extends BaseChatModel {
  constructor(turns) {
    super({});
    this.turns = turns;
    this.calls = 0;
    this.boundTools = [];
  }
  _llmType() {
    return "scripted";
  }
  bindTools(tools) {
    this.boundTools = tools.map((t) => t.name);
    return this;
  }
  async _generate(messages) {
    const turn = this.turns[this.calls++];
    if (!turn) throw new Error(`the script has no turn ${this.calls}`);
    const message = turn(messages);
    return { generations: [{ text: typeof message.content === "string" ? message.content : "", message }] };
  }
}

let callSeq = 0;
/** A turn that calls tools: [name, args] pairs. */
function toolTurn(...calls) {
  return () => new AIMessage({ content: "", tool_calls: calls.map(([name, args]) => ({ name, args, id: `call_${++callSeq}`, type: "tool_call" })) });
}

/** The text of the tool messages named name, in order. */
function toolTexts(messages, name) {
  return messages
    .filter((m) => m.getType?.() === "tool" && m.name === name)
    .map((m) => (typeof m.content === "string" ? m.content : m.content.map((c) => c.text ?? "").join("")));
}

describe("deepagents agent loop", () => {
  test("writes a script, edits, lists, runs it, reads and greps its result", async () => {
    const dir = `${home}/job`;
    const script = [
      "import pathlib, uuid",
      'GREETING = "hello"',
      "total = sum(i * i for i in range(1, 101))",
      "token = str(uuid.uuid4())",
      'out = pathlib.Path(__file__).with_name("result.txt")',
      'out.write_text(f"{GREETING}: total={total} token={token}\\n")',
      'print(f"wrote token {token}")',
      "",
    ].join("\n");
    const model = new ScriptedModel([
      toolTurn(["write_file", { file_path: `${dir}/job.py`, content: script }]),
      toolTurn(["edit_file", { file_path: `${dir}/job.py`, old_string: 'GREETING = "hello"', new_string: 'GREETING = "hello from airlock"' }]),
      toolTurn(["ls", { path: dir }], ["glob", { pattern: "*.py", path: dir }]),
      toolTurn(["execute", { command: `cd ${dir} && python3 job.py` }]),
      toolTurn(["read_file", { file_path: `${dir}/result.txt` }], ["grep", { pattern: "total=", path: dir, glob: "*.txt" }]),
      (messages) => {
        // The answer quotes what read_file returned: the model cannot know it.
        const read = toolTexts(messages, "read_file").at(-1) ?? "";
        const m = /(hello from airlock: total=\d+ token=[0-9a-f-]{36})/.exec(read);
        return new AIMessage(m ? `The script ran in the sandbox and wrote: ${m[1]}` : `I could not read the result: ${read}`);
      },
    ]);
    const agent = createDeepAgent({ model, backend, systemPrompt: "You are a coding assistant with a sandbox." });
    const res = await agent.invoke({ messages: [{ role: "user", content: "Write a script that sums the squares of 1..100, run it and tell me what it wrote." }] }, { recursionLimit: 100 });

    assert.equal(model.calls, 6, "the model was asked once per turn");
    for (const name of ["write_file", "edit_file", "ls", "glob", "execute", "read_file", "grep"]) {
      assert.ok(model.boundTools.includes(name), `the agent offers ${name}: ${model.boundTools}`);
    }
    const msgs = res.messages;
    assert.match(toolTexts(msgs, "write_file")[0], /Successfully wrote/);
    assert.match(toolTexts(msgs, "edit_file")[0], /Successfully replaced 1 occurrence/);
    assert.match(toolTexts(msgs, "ls")[0], new RegExp(`${dir}/job\\.py \\(\\d+ bytes\\)`));
    assert.equal(toolTexts(msgs, "glob")[0], "job.py");
    const executed = toolTexts(msgs, "execute")[0];
    assert.match(executed, /^wrote token [0-9a-f-]{36}\n/);
    assert.match(executed, /\[Command succeeded with exit code 0\]/);
    assert.match(toolTexts(msgs, "read_file")[0], /hello from airlock: total=338350 token=/);
    const grepped = toolTexts(msgs, "grep")[0];
    assert.match(grepped, /result\.txt/);
    assert.doesNotMatch(grepped, /job\.py/, "the glob kept grep to *.txt");

    // In the sandbox itself: the edited script, and what running it wrote.
    assert.equal(await airlock.files.readText(backend.id, `${dir}/job.py`), script.replace('GREETING = "hello"', 'GREETING = "hello from airlock"'));
    const result = await airlock.files.readText(backend.id, `${dir}/result.txt`);
    const token = /token=([0-9a-f-]{36})/.exec(result)?.[1];
    assert.ok(token, result);
    assert.ok(executed.startsWith(`wrote token ${token}\n`), executed);
    const answer = msgs.at(-1);
    assert.equal(answer.getType(), "ai");
    assert.equal(answer.content, `The script ran in the sandbox and wrote: hello from airlock: total=338350 token=${token}`);
  });

  test("a large result goes to the agent's state through CompositeBackend", async () => {
    // The sandbox's / is not writable, so deepagents cannot save a large
    // tool result at /large_tool_results there; routed to a StateBackend
    // (as docs/integrations/deepagents.md shows) it is kept and readable.
    const model = new ScriptedModel([
      toolTurn(["execute", { command: "seq 1 40000" }]),
      (messages) => {
        const path = /saved in the filesystem at this path: (\S+)/.exec(toolTexts(messages, "execute")[0])?.[1];
        return path ? toolTurn(["read_file", { file_path: path, offset: 39990, limit: 3 }])() : new AIMessage("not saved");
      },
      (messages) => new AIMessage(toolTexts(messages, "read_file")[0]),
    ]);
    const composite = new CompositeBackend(backend, { "/large_tool_results/": new StateBackend(), "/conversation_history/": new StateBackend() });
    const agent = createDeepAgent({ model, backend: composite });
    const res = await agent.invoke({ messages: [{ role: "user", content: "count" }] }, { recursionLimit: 100 });
    assert.match(toolTexts(res.messages, "execute")[0], /^Tool result too large, the result of this tool call \S+ was saved in the filesystem at this path: \/large_tool_results\//);
    assert.match(res.messages.at(-1).content, /39991\n.*39992\n.*39993/s);

    const plain = new ScriptedModel([toolTurn(["execute", { command: "seq 1 40000" }]), () => new AIMessage("done")]);
    const res2 = await createDeepAgent({ model: plain, backend }).invoke({ messages: [{ role: "user", content: "count" }] }, { recursionLimit: 100 });
    assert.match(toolTexts(res2.messages, "execute")[0], /could not be saved to the filesystem: .*permission_denied/);
  });
});

describe("backend", () => {
  test("upload and download bytes, with per-file errors", async () => {
    const bytes = new Uint8Array(70_000);
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7919) % 256; // every byte value, NUL and invalid UTF-8 included
    const p = `${home}/bin/blob.bin`;
    const up = await backend.uploadFiles([
      [p, bytes],
      ["", bytes],
      [home, bytes],
      ["/etc/airlock-not-yours", bytes],
      [`${home}/bin/empty`, new Uint8Array(0)],
    ]);
    assert.deepEqual(up, [
      { path: p, error: null },
      { path: "", error: "invalid_path" },
      { path: home, error: "is_directory" },
      { path: "/etc/airlock-not-yours", error: "permission_denied" },
      { path: `${home}/bin/empty`, error: null },
    ]);
    const down = await backend.downloadFiles([p, `${home}/no-such-file`, home, "/tmp/a\0b", `${home}/bin/empty`]);
    assert.deepEqual(down[0].content, bytes);
    assert.equal(down[0].error, null);
    assert.deepEqual(down.slice(1).map((d) => [d.path, d.content === null ? null : d.content.length, d.error]), [
      [`${home}/no-such-file`, null, "file_not_found"],
      [home, null, "is_directory"],
      ["/tmp/a\0b", null, "invalid_path"],
      [`${home}/bin/empty`, 0, null],
    ]);
    // The bytes really are in the sandbox.
    const sum = await backend.execute(`sha256sum ${p}`);
    const want = Buffer.from(await crypto.subtle.digest("SHA-256", bytes)).toString("hex");
    assert.equal(sum.output.split(" ")[0], want);
  });

  test("execute: combined output, exit codes, timeout", async () => {
    const r = await backend.execute("echo out; echo err >&2; exit 3");
    assert.deepEqual(r, { output: "out\nerr\n", exitCode: 3, truncated: false });
    assert.deepEqual(await backend.execute("printf partial; printf ' oops' >&2"), { output: "partial\n oops", exitCode: 0, truncated: false });
    assert.equal((await backend.execute("kill -9 $$")).exitCode, 137);
    assert.equal((await backend.execute("nosuchcommand")).exitCode, 127);

    const t0 = Date.now();
    const slow = await backend.execute("echo started; sleep 30; echo never", { timeout: 1 });
    assert.ok(Date.now() - t0 < 15_000, `the timeout ended the command (${Date.now() - t0} ms)`);
    assert.equal(slow.exitCode, 124);
    assert.equal(slow.output, "started\n[the command timed out after 1 s and was killed]");
    await assert.rejects(backend.execute("true", { timeout: 0 }), InvalidArgumentError);
    await assert.rejects(backend.execute("true", { timeout: 3601 }), InvalidArgumentError);

    // The backend's own default timeout.
    const quick = new AirlockSandbox(airlock, backend.id, { BaseSandbox, commandTimeoutS: 1 });
    assert.equal((await quick.execute("sleep 20")).exitCode, 124);
  });

  test("execute: huge output is cut and flagged", async () => {
    const big = await backend.execute("head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2");
    assert.equal(big.truncated, true);
    assert.equal(big.exitCode, 0);
    assert.ok(big.output.length <= 1 << 20, `output of ${big.output.length} chars`);
    assert.match(big.output, /^a{1000}/);

    const small = new AirlockSandbox(airlock, backend.id, { BaseSandbox, maxOutputBytes: 1000 });
    const cut = await small.execute("head -c 5000 /dev/zero | tr '\\0' b");
    assert.deepEqual(cut, { output: "b".repeat(1000), exitCode: 0, truncated: true });
    // A cut never splits a character.
    const utf = await small.execute("printf x; for i in $(seq 400); do printf 'é€'; done"); // 1000 bytes end inside a €
    assert.equal(utf.truncated, true);
    assert.ok(!utf.output.includes("\ufffd") && Buffer.byteLength(utf.output) <= 1000 && Buffer.byteLength(utf.output) > 990, utf.output.length);
    assert.deepEqual(await small.execute("echo fits"), { output: "fits\n", exitCode: 0, truncated: false });
  });

  test("grep takes the pattern literally", async () => {
    const dir = `${home}/grep`;
    const enc = new TextEncoder();
    const up = await backend.uploadFiles([
      [`${dir}/a.txt`, enc.encode('first line\nx = a.*b (c|d) [e]+ $HOME \\n \'q\' "dq"\naXXXb c\n')],
      [`${dir}/sub/b.md`, enc.encode("nothing\nagain a.*b (c|d) here\n")],
    ]);
    assert.deepEqual(up.map((u) => u.error), [null, null]);
    const all = await backend.grep("a.*b (c|d)", dir);
    assert.deepEqual(
      all.matches.map((m) => [m.path, m.line]).sort(),
      [
        [`${dir}/a.txt`, 2],
        [`${dir}/sub/b.md`, 2],
      ],
    );
    assert.equal(all.matches.find((m) => m.path.endsWith("a.txt")).text, 'x = a.*b (c|d) [e]+ $HOME \\n \'q\' "dq"');
    const quoted = await backend.grep(`$HOME \\n 'q' "dq"`, dir);
    assert.deepEqual(quoted.matches.map((m) => m.line), [2]);
    const onlyMd = await backend.grep("a.*b", dir, "*.md");
    assert.deepEqual(onlyMd.matches.map((m) => m.path), [`${dir}/sub/b.md`]);
    assert.deepEqual((await backend.grep("[e]+x", dir)).matches, []);
  });

  test("ls, glob, read, edit, delete", async () => {
    const dir = `${home}/tree`;
    const enc = new TextEncoder();
    await backend.uploadFiles([
      [`${dir}/run.sh`, enc.encode("#!/bin/sh\necho one\n")],
      [`${dir}/lines.txt`, enc.encode("l1\nl2\nl3\nl4\n")],
      [`${dir}/deep/x.py`, enc.encode("print(1)\n")],
    ]);
    await backend.execute(`ln -s deep ${dir}/link`);
    const ls = await backend.ls(dir);
    assert.deepEqual(
      ls.files.map((f) => [f.path, f.is_dir]).sort(),
      [
        [`${dir}/deep/`, true],
        [`${dir}/lines.txt`, false],
        [`${dir}/link/`, true], // followed, as BaseSandbox does
        [`${dir}/run.sh`, false],
      ],
    );
    assert.equal(ls.files.find((f) => f.path.endsWith("lines.txt")).size, 12);
    assert.ok(!Number.isNaN(Date.parse(ls.files[0].modified_at)));
    assert.deepEqual((await backend.ls(`${dir}/link`)).files.map((f) => f.path), [`${dir}/link/x.py`]);
    assert.deepEqual((await backend.ls(`${dir}/deep/`)).files.map((f) => f.path), [`${dir}/deep/x.py`]);
    assert.match((await backend.ls(`${dir}/missing`)).error, /no such directory/);
    assert.match((await backend.ls(`${dir}/lines.txt`)).error, /not a directory/);

    assert.deepEqual((await backend.glob("**/*.py", dir)).files.map((f) => f.path).sort(), ["deep/x.py", "link/x.py"]);

    const part = await backend.read(`${dir}/lines.txt`, 1, 2);
    assert.equal(part.content, "     2\tl2\n     3\tl3\n");
    assert.equal(part.totalLines, 4);
    assert.equal(part.nextOffset, 3);
    assert.match((await backend.read(`${dir}/nope.txt`)).error, /not found/);

    // An edit keeps the file's mode (the files API replaces the content only).
    await backend.execute(`chmod 755 ${dir}/run.sh`);
    const ed = await backend.edit(`${dir}/run.sh`, "echo one", "echo two");
    assert.equal(ed.error, undefined);
    assert.equal(ed.occurrences, 1);
    assert.deepEqual(await backend.execute(`${dir}/run.sh`), { output: "two\n", exitCode: 0, truncated: false });
    assert.match((await backend.edit(`${dir}/lines.txt`, "l", "L")).error, /Multiple occurrences/);

    assert.equal((await backend.write(`${dir}/new.txt`, "fresh")).error, undefined);
    assert.equal(await airlock.files.readText(backend.id, `${dir}/new.txt`), "fresh");
    assert.equal((await backend.delete(`${dir}/deep`)).error, undefined);
    await assert.rejects(airlock.files.stat(backend.id, `${dir}/deep`), NotFoundError);
  });

  test("a command the sandbox's policy denies is a result", async () => {
    const guarded = await AirlockSandbox.create(airlock, { metadata: { suite: "tssdk-deepagents" }, timeoutS: 120, commandPolicy: { rules: [{ action: "deny", prefix: ["rm"] }] } }, { BaseSandbox });
    try {
      await guarded.execute("touch /tmp/keep");
      const r = await guarded.execute("rm -f /tmp/keep");
      assert.equal(r.exitCode, 126);
      assert.match(r.output, /command policy denies/);
      assert.equal((await guarded.execute("test -e /tmp/keep")).exitCode, 0, "the denied command did not run");
      // A key without the exec scope is the caller's error, thrown.
      const key = await airlock.keys.create({ name: "tssdk-deepagents-readonly", scopes: ["sandboxes:read", "files"] });
      try {
        const limited = new AirlockSandbox(new Airlock({ apiKey: key.secret }), guarded.id, { BaseSandbox });
        await assert.rejects(limited.execute("true"), PermissionDeniedError);
        assert.deepEqual(await limited.uploadFiles([["/tmp/by-files-key", new Uint8Array([1])]]), [{ path: "/tmp/by-files-key", error: null }]);
      } finally {
        await airlock.keys.revoke(key.id);
      }
    } finally {
      await guarded.close();
    }
    assert.equal(guarded.isRunning, false);
    await guarded.close(); // a second close does nothing
    const ended = await airlock.sandboxes.get(guarded.id).catch((err) => err);
    assert.ok(ended instanceof NotFoundError || ended.state === "stopped", String(ended));
    // A file request of a sandbox that ended, or was never there, is
    // thrown, not a file error.
    await assert.rejects(guarded.downloadFiles(["/etc/hostname"]), /ended/);
    const ghost = new AirlockSandbox(airlock, "sb-aaaaaaaaaaaaaaaa", { BaseSandbox });
    await assert.rejects(ghost.downloadFiles(["/etc/hostname"]), NotFoundError);
    await assert.rejects(ghost.uploadFiles([["/tmp/x", new Uint8Array(1)]]), NotFoundError);
  });

  test("construction and connect are checked", async () => {
    assert.throws(() => new AirlockSandbox(airlock, "sb-bad", { BaseSandbox }), InvalidArgumentError);
    assert.throws(() => new AirlockSandbox(airlock, backend.id, {}), InvalidArgumentError);
    assert.throws(() => new AirlockSandbox(airlock, backend.id, { BaseSandbox: class {} }), InvalidArgumentError);
    assert.throws(() => new AirlockSandbox(airlock, backend.id, { BaseSandbox, commandTimeoutS: 4000 }), InvalidArgumentError);
    const again = await AirlockSandbox.connect(airlock, backend.id);
    assert.equal((await again.execute("echo $((6*7))")).output, "42\n");
    await assert.rejects(AirlockSandbox.connect(airlock, "sb-aaaaaaaaaaaaaaaa"), NotFoundError);
  });

  test("deepagents' own declarations accept the backend", async () => {
    // The SDK declares the protocol's shapes itself (its compilation never
    // reads deepagents' or LangChain's): this compiles a use of the
    // backend against deepagents' declarations.
    const sdk = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
    const tsc = path.join(sdk, "node_modules", "typescript", "bin", "tsc");
    const args = [tsc, "--noEmit", "--strict", "--skipLibCheck", "--target", "ES2022", "--module", "NodeNext", "--moduleResolution", "NodeNext", "--lib", "ES2022,ESNext.Disposable,DOM", "test/deepagents.types.mts"];
    await new Promise((resolve, reject) => {
      execFile(process.execPath, args, { cwd: sdk, timeout: 180_000 }, (err, stdout, stderr) => (err ? reject(new Error(`tsc: ${err.message}\n${stdout}${stderr}`)) : resolve()));
    });
  });

  test("the SDK loads without deepagents; only the backend needs it", async () => {
    const sdk = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
    const tmp = await mkdtemp(path.join(os.tmpdir(), "airlock-sdk-nodeps-"));
    try {
      await cp(path.join(sdk, "dist"), path.join(tmp, "dist"), { recursive: true });
      await cp(path.join(sdk, "package.json"), path.join(tmp, "package.json"));
      const probe = `
        const missing = await import("deepagents").then(() => false, () => true);
        const { Airlock, AirlockSandbox } = await import("./dist/index.js");
        const err = await AirlockSandbox.create(new Airlock({ url: "http://127.0.0.1:9", apiKey: "k" })).catch((e) => e);
        console.log(JSON.stringify({ missing, airlock: typeof Airlock, code: err.code, message: err.message }));
      `;
      const out = await new Promise((resolve, reject) => {
        execFile(process.execPath, ["--input-type=module", "-e", probe], { cwd: tmp, timeout: 30_000 }, (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)));
      });
      const got = JSON.parse(out);
      assert.equal(got.missing, true, "deepagents must not be reachable from the copy");
      assert.equal(got.airlock, "function");
      assert.equal(got.code, "failed_precondition");
      assert.match(got.message, /needs the deepagents package/);
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  });
});
