// The Anthropic tool executor against a real daemon (AIRLOCK_URL,
// AIRLOCK_API_KEY): the daemon runs the tools
// (internal/toolexec/anthropic), so these are its tests too: the text
// editor's edge cases, the persistent bash session and its isolation per
// session, the program tool, and a full agent loop of the real
// @anthropic-ai/sdk against a scripted Messages API server on loopback.

import assert from "node:assert/strict";
import http from "node:http";
import { after, before, describe, test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";

import { Airlock, AnthropicExecutor, InvalidArgumentError, NotFoundError, anthropicTools } from "../dist/index.js";

const airlock = new Airlock();
let sb;
let home;
let ex;

before(async () => {
  sb = await airlock.sandboxes.create({ metadata: { suite: "tssdk-anthropic" }, limits: { memoryMb: 512 }, timeoutS: 600 });
  home = (await airlock.exec(sb.id, { command: 'printf %s "$HOME"' })).stdout;
  ex = new AnthropicExecutor(airlock, sb.id, { sessionId: "suite" });
});

after(async () => {
  await ex?.close();
  if (sb) await airlock.sandboxes.delete(sb.id);
});

let seq = 0;
/** A tool_use block. */
function use(name, input) {
  return { type: "tool_use", id: `toolu_${++seq}`, name, input };
}
/** Runs one tool_use block and returns its result. */
async function one(name, input, executor = ex) {
  const u = use(name, input);
  const [r] = await executor.runToolUses({ content: [u] });
  assert.equal(r.type, "tool_result");
  assert.equal(r.tool_use_id, u.id);
  return r;
}
const edit = (input) => one("str_replace_based_edit_tool", input);
const bash = (input, executor) => one("bash", input, executor);

describe("text editor", () => {
  test("create, view with line numbers and ranges", async () => {
    const path = `${home}/ed/nested/lines.txt`;
    const c = await edit({ command: "create", path, file_text: "one\ntwo\nthree\nfour\n" });
    assert.equal(c.is_error, undefined, c.content);
    assert.equal(await airlock.files.readText(sb.id, path), "one\ntwo\nthree\nfour\n");

    const all = await edit({ command: "view", path });
    assert.equal(all.content, `Here's the result of running \`cat -n\` on ${path}:\n     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n`);
    const mid = await edit({ command: "view", path, view_range: [2, 3] });
    assert.match(mid.content, /\n     2\ttwo\n     3\tthree\n$/);
    assert.doesNotMatch(mid.content, /one|four/);
    const toEnd = await edit({ command: "view", path, view_range: [3, -1] });
    assert.match(toEnd.content, /\n     3\tthree\n     4\tfour\n$/);

    for (const [range, msg] of [
      [[0, 2], /first element `0` should be within the range of lines of the file: \[1, 4\]/],
      [[2, 9], /second element `9` should be smaller than the number of lines in the file: `4`/],
      [[3, 2], /second element `2` should be larger or equal than its first `3`/],
      [[1], /list of two integers/],
    ]) {
      const r = await edit({ command: "view", path, view_range: range });
      assert.equal(r.is_error, true, JSON.stringify(range));
      assert.match(r.content, msg);
    }

    const cut = await edit({ command: "view", path, max_characters: 20 });
    assert.ok(cut.content.startsWith("Here's the result of"));
    assert.match(cut.content, /\[output truncated to 20 of \d+ characters\]$/);

    const missing = await edit({ command: "view", path: `${home}/ed/none.txt` });
    assert.equal(missing.is_error, true);
    assert.match(missing.content, /does not exist/);
  });

  test("view of a directory lists two levels, hidden entries left out", async () => {
    const d = `${home}/tree`;
    await airlock.files.write(sb.id, `${d}/a.txt`, "a");
    await airlock.files.write(sb.id, `${d}/sub/b.txt`, "b");
    await airlock.files.write(sb.id, `${d}/sub/deeper/c.txt`, "c");
    await airlock.files.write(sb.id, `${d}/.hidden/h.txt`, "h");
    await airlock.files.write(sb.id, `${d}/.secret`, "s");
    const r = await edit({ command: "view", path: d });
    assert.equal(r.is_error, undefined, r.content);
    const lines = r.content.trim().split("\n");
    assert.match(lines[0], /up to 2 levels deep in .*\/tree, excluding hidden items:$/);
    assert.deepEqual(lines.slice(1), [`${d}/`, `${d}/a.txt`, `${d}/sub/`, `${d}/sub/b.txt`, `${d}/sub/deeper/`]);
    const ranged = await edit({ command: "view", path: d, view_range: [1, 2] });
    assert.equal(ranged.is_error, true);
    assert.match(ranged.content, /not allowed when `path` points to a directory/);
  });

  test("str_replace: exactly one match, else the documented errors", async () => {
    const path = `${home}/ed/rep.py`;
    await airlock.files.write(sb.id, path, "x = 1\ny = 1\nprint(x + y)\n");
    const none = await edit({ command: "str_replace", path, old_str: "z = 1", new_str: "z = 2" });
    assert.equal(none.is_error, true);
    assert.equal(none.content, "No match found for replacement. Please check your text and try again.");
    const many = await edit({ command: "str_replace", path, old_str: " = 1", new_str: " = 2" });
    assert.equal(many.is_error, true);
    assert.equal(many.content, "Found 2 matches for replacement text. Please provide more context to make a unique match.");
    // Nothing was written by the failed edits.
    assert.equal(await airlock.files.readText(sb.id, path), "x = 1\ny = 1\nprint(x + y)\n");

    const ok = await edit({ command: "str_replace", path, old_str: "y = 1", new_str: "y = $& 2 $1" });
    assert.equal(ok.is_error, undefined, ok.content);
    assert.match(ok.content, /has been edited/);
    assert.match(ok.content, /     2\ty = \$& 2 \$1/);
    // Replacement patterns of String.replace are not interpreted.
    assert.equal(await airlock.files.readText(sb.id, path), "x = 1\ny = $& 2 $1\nprint(x + y)\n");
    const del = await edit({ command: "str_replace", path, old_str: "print(x + y)\n" });
    assert.equal(del.is_error, undefined, del.content);
    assert.equal(await airlock.files.readText(sb.id, path), "x = 1\ny = $& 2 $1\n");
    const dir = await edit({ command: "str_replace", path: `${home}/ed`, old_str: "a", new_str: "b" });
    assert.equal(dir.is_error, true);
    assert.match(dir.content, /is a directory/);
  });

  test("insert: at the start, in the middle, at the end, insert_text accepted", async () => {
    const path = `${home}/ed/ins.txt`;
    await airlock.files.write(sb.id, path, "b\nd");
    assert.equal((await edit({ command: "insert", path, insert_line: 0, new_str: "a" })).is_error, undefined);
    assert.equal((await edit({ command: "insert", path, insert_line: 2, new_str: "c\n" })).is_error, undefined);
    assert.equal((await edit({ command: "insert", path, insert_line: 4, insert_text: "e" })).is_error, undefined);
    assert.equal(await airlock.files.readText(sb.id, path), "a\nb\nc\nd\ne\n");
    const bad = await edit({ command: "insert", path, insert_line: 9, new_str: "x" });
    assert.equal(bad.is_error, true);
    assert.match(bad.content, /Invalid `insert_line` parameter: 9. It should be within the range of lines of the file: \[0, 5\]/);
    const unknown = await edit({ command: "undo_edit", path });
    assert.equal(unknown.is_error, true);
    assert.match(unknown.content, /not supported/);
  });

  test("a CRLF file keeps its line endings", async () => {
    const path = `${home}/ed/dos.txt`;
    await airlock.files.write(sb.id, path, "alpha\r\nbeta\r\ngamma\r\n");
    const v = await edit({ command: "view", path });
    assert.match(v.content, /     2\tbeta\n/);
    assert.doesNotMatch(v.content, /\r/);
    const r = await edit({ command: "str_replace", path, old_str: "beta\ngamma", new_str: "BETA\nB2\ngamma" });
    assert.equal(r.is_error, undefined, r.content);
    const i = await edit({ command: "insert", path, insert_line: 1, new_str: "one\ntwo" });
    assert.equal(i.is_error, undefined, i.content);
    assert.equal(await airlock.files.readText(sb.id, path), "alpha\r\none\r\ntwo\r\nBETA\r\nB2\r\ngamma\r\n");
  });

  test("a binary file is refused for view and edits", async () => {
    const path = `${home}/ed/blob.bin`;
    const bytes = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0xff, 0xfe, 0x00, 0x01]);
    await airlock.files.write(sb.id, path, bytes);
    for (const input of [
      { command: "view", path },
      { command: "str_replace", path, old_str: "PNG", new_str: "JPG" },
      { command: "insert", path, insert_line: 0, new_str: "x" },
    ]) {
      const r = await edit(input);
      assert.equal(r.is_error, true, input.command);
      assert.match(r.content, /is not UTF-8 text \(a binary file\?\)/);
    }
    assert.deepEqual([...(await airlock.files.readBytes(sb.id, path))], [...bytes]);
  });
});

describe("results", () => {
  test("every tool_use in order, unknown tools as errors, malformed messages rejected", async () => {
    const blocks = [
      { type: "text", text: "let me look" },
      use("bash", { command: "echo first" }),
      use("web_search", { query: "x" }),
      use("str_replace_based_edit_tool", { command: "view", path: home }),
      use("bash", "not an object"),
    ];
    const rs = await ex.runToolUses({ role: "assistant", content: blocks });
    assert.deepEqual(
      rs.map((r) => r.tool_use_id),
      blocks.slice(1).map((b) => b.id),
    );
    assert.equal(rs[0].content, "first\n");
    assert.equal(rs[1].is_error, true);
    assert.match(rs[1].content, /Unknown tool "web_search"/);
    assert.equal(rs[2].is_error, undefined, rs[2].content);
    assert.equal(rs[3].is_error, true);
    assert.deepEqual(
      anthropicTools.map((t) => `${t.type ?? "custom"}/${t.name}`),
      ["bash_20250124/bash", "text_editor_20250728/str_replace_based_edit_tool", "custom/airlock_run_program"],
    );
    assert.equal(AnthropicExecutor.tools, anthropicTools);
    await assert.rejects(ex.runToolUses({}), InvalidArgumentError);
    // The sandbox itself missing is the API's error, not a tool result.
    const gone = new AnthropicExecutor(airlock, "sb-aaaaaaaaaaaaaaaa");
    await assert.rejects(gone.runToolUses({ content: [use("bash", { command: "true" })] }), NotFoundError);
    assert.throws(() => new AnthropicExecutor(airlock, ""), InvalidArgumentError);
    assert.throws(() => new AnthropicExecutor(airlock, sb.id, { sessionId: "a b" }), InvalidArgumentError);
  });
});

describe("bash", () => {
  test("a persistent session: cwd and variables persist, stderr merged, status noted", async () => {
    assert.equal((await bash({ command: "mkdir -p /tmp/persist && cd /tmp/persist && export AIRLOCK_VAR=kept" })).content, "(no output)");
    assert.equal((await bash({ command: 'pwd; echo "$AIRLOCK_VAR"' })).content, "/tmp/persist\nkept\n");
    const mixed = await bash({ command: "echo out; echo err >&2; echo out2" });
    assert.equal(mixed.content, "out\nerr\nout2\n");
    const failed = await bash({ command: "echo nope; false" });
    assert.equal(failed.is_error, undefined);
    assert.equal(failed.content, "nope\n\n[exit status 1]");
    // A command cannot eat the session's input; a heredoc, quotes and a
    // syntax error are the shell's business.
    assert.equal((await bash({ command: "cat; echo after-cat" })).content, "after-cat\n");
    assert.equal((await bash({ command: "cat <<'EOF'\nit's \\ $HOME\nEOF" })).content, "it's \\ $HOME\n");
    const syntax = await bash({ command: "echo 'unterminated" });
    assert.match(syntax.content, /unexpected EOF|unexpected end of file/);
    assert.match(syntax.content, /\[exit status 2\]/);
    assert.equal((await bash({ command: "echo still here" })).content, "still here\n");
    // No trailing newline is kept as it is.
    assert.equal((await bash({ command: "printf abc" })).content, "abc");

    const rs = await bash({ restart: true });
    assert.equal(rs.is_error, undefined);
    assert.match(rs.content, /restarted/);
    assert.equal((await bash({ command: 'pwd; echo "[$AIRLOCK_VAR]"' })).content, `${home}\n[]\n`);
  });

  test("a command past its timeout is an error asking for a restart", async () => {
    const short = new AnthropicExecutor(airlock, sb.id, { sessionId: "timeouts", bashTimeoutMs: 1500 });
    try {
      const t0 = Date.now();
      const r = await bash({ command: "echo started; sleep 47.5" }, short);
      assert.ok(Date.now() - t0 < 15_000, "the timeout ended the wait");
      assert.equal(r.is_error, true);
      assert.match(r.content, /did not finish within 1.5 s/);
      assert.match(r.content, /\{"restart": true\}/);
      assert.match(r.content, /started/);
      const again = await bash({ command: "echo hi" }, short);
      assert.equal(again.is_error, true);
      assert.match(again.content, /must be restarted/);
      // The shell and its sleep are gone.
      const { processes } = await airlock.processes.list(sb.id);
      assert.ok(!processes.some((p) => p.cmd.join(" ").includes("sleep 47.5")), JSON.stringify(processes.map((p) => p.cmd)));
      assert.ok(!processes.some((p) => p.tag === "anthropic-bash-timeouts"));
      assert.equal((await bash({ restart: true }, short)).is_error, undefined);
      assert.equal((await bash({ command: "echo back" }, short)).content, "back\n");
    } finally {
      await short.close();
    }
  });

  test("output is capped with a note; an exiting shell is replaced", async () => {
    const small = new AnthropicExecutor(airlock, sb.id, { sessionId: "caps", maxOutputChars: 4096 });
    try {
      const r = await bash({ command: "seq 1 200000" }, small);
      assert.ok(r.content.length < 4096 + 200, `${r.content.length} characters`);
      assert.match(r.content, /^1\n2\n3\n/);
      assert.match(r.content, /\[\.\.\. \d+ characters of output cut \.\.\.\]/);
      assert.match(r.content, /\n200000\n$/);
      const cut = Number(/\[\.\.\. (\d+) characters/.exec(r.content)[1]);
      const full = (await airlock.exec(sb.id, { command: "seq 1 200000 | wc -c" })).stdout.trim();
      assert.equal(r.content.length - r.content.match(/\n\[\.\.\. .*\.\.\.\]\n/)[0].length + cut, Number(full));

      const ex1 = await bash({ command: "echo bye; exit 3" }, small);
      assert.equal(ex1.is_error, true);
      assert.match(ex1.content, /^bye\n/);
      assert.match(ex1.content, /exit code 3/);
      assert.equal((await bash({ command: "echo new session" }, small)).content, "new session\n");
    } finally {
      await small.close();
    }
    const { processes } = await airlock.processes.list(sb.id);
    assert.ok(!processes.some((p) => p.tag === "anthropic-bash-caps"), "close ended the session");
  });
});

describe("sessions and programs", () => {
  test("two executors with different sessions do not share shell state", async () => {
    const a = new AnthropicExecutor(airlock, sb.id, { sessionId: "iso-a" });
    const b = new AnthropicExecutor(airlock, sb.id);
    const a2 = new AnthropicExecutor(airlock, sb.id, { sessionId: "iso-a" });
    try {
      assert.equal((await bash({ command: "cd /tmp && export ISO=from-a" }, a)).content, "(no output)");
      assert.equal((await bash({ command: 'pwd; echo "[$ISO]"' }, b)).content, `${home}\n[]\n`);
      assert.equal((await bash({ command: 'pwd; echo "[$ISO]"' }, a)).content, "/tmp\n[from-a]\n");
      // The same key, sandbox and session name is the same conversation.
      assert.equal((await bash({ command: 'echo "[$ISO]"' }, a2)).content, "[from-a]\n");
      // Concurrent uses of one session run one after the other.
      const [x, y] = await Promise.all([
        bash({ command: "echo one > /tmp/iso-order; sleep 0.3; cat /tmp/iso-order" }, a),
        bash({ command: "echo two > /tmp/iso-order; cat /tmp/iso-order" }, a2),
      ]);
      assert.deepEqual([x.content, y.content].sort(), ["one\n", "two\n"]);
    } finally {
      await a.close();
      await b.close();
    }
    const { processes } = await airlock.processes.list(sb.id);
    assert.ok(!processes.some((p) => p.tag === "anthropic-bash-iso-a" || p.tag === `anthropic-bash-${b.sessionId}`));
  });

  test("the program tool runs a program through /run and reports how it ended", async () => {
    const py = await one("airlock_run_program", { language: "python", code: "import sys\nprint(sum(range(10)))\nprint('warn', file=sys.stderr)" });
    assert.equal(py.is_error, undefined, py.content);
    assert.equal(py.content, "45\n[stderr]\nwarn\n");
    const sh = await one("airlock_run_program", { language: "bash", code: "echo hi; exit 4" });
    assert.equal(sh.content, "hi\n[exit status 4]");
    const slow = await one("airlock_run_program", { language: "bash", code: "sleep 30", timeout_s: 1 });
    assert.match(slow.content, /killed at its timeout/);
    const bad = await one("airlock_run_program", { language: "cobol", code: "x" });
    assert.equal(bad.is_error, true);
    assert.match(bad.content, /must be one of python, javascript, bash/);
  });

  test("the program tool's program calls a gateway tool, and its call is reported", async () => {
    // A tool with an HTTP upstream on the host's loopback (the suite's
    // daemon runs with --gateway-allow 127.0.0.1/32), granted to a sandbox
    // of its own; the program calls it through the in-sandbox library.
    const seen = [];
    const upstream = http.createServer((req, res) => {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        const { a, b } = JSON.parse(body);
        seen.push([a, b]);
        res.setHeader("Content-Type", "application/json");
        res.end(JSON.stringify({ sum: a + b }));
      });
    });
    await new Promise((r) => upstream.listen(0, "127.0.0.1", r));
    const name = `tssdk_sum_${Date.now()}`;
    await airlock.tools.create({
      name,
      description: "Adds two numbers.",
      input_schema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
      upstream: { kind: "http", http: { method: "POST", url: `http://127.0.0.1:${upstream.address().port}/sum` } },
    });
    let granted;
    let gx;
    try {
      granted = await airlock.sandboxes.create({ metadata: { suite: "tssdk-anthropic" }, tools: [name], timeoutS: 300 });
      gx = new AnthropicExecutor(airlock, granted.id, { sessionId: "gateway" });
      const r = await one("airlock_run_program", {
        language: "python",
        code: `from tools import ${name}\nprint(${name}(a=2, b=40)["sum"])`,
      }, gx);
      assert.equal(r.is_error, undefined, r.content);
      assert.match(r.content, /^42\n/);
      assert.match(r.content, new RegExp(`\\[tool call ${name}: ok`));
      assert.deepEqual(seen, [[2, 40]]);
      // The sandbox of the suite was not granted the tool: the same program fails there.
      const denied = await one("airlock_run_program", { language: "python", code: `from tools import ${name}\nprint(${name}(a=1, b=1))` });
      assert.doesNotMatch(denied.content, /^2\n/);
      assert.deepEqual(seen, [[2, 40]]);
    } finally {
      await gx?.close();
      if (granted) await airlock.sandboxes.delete(granted.id);
      await airlock.tools.delete(name);
      upstream.close();
    }
  });
});

describe("command policy", () => {
  test("in a sandbox with a command policy each command is the API's exec: judged, asked, audited", async () => {
    const pol = await airlock.sandboxes.create({
      metadata: { suite: "tssdk-anthropic-policy" },
      timeoutS: 300,
      commandPolicy: { default: "allow", rules: [{ action: "deny", prefix: ["rm"] }, { action: "ask", prefix: ["git"] }] },
    });
    const pex = new AnthropicExecutor(airlock, pol.id, { sessionId: "policy" });
    try {
      const ok = await bash({ command: "echo hi; echo err >&2" }, pex);
      assert.equal(ok.is_error, undefined, ok.content);
      assert.match(ok.content, /^hi\nerr\n\[this sandbox has a command policy: each command runs on its own/);
      // A denied command, even inside a list, never runs.
      const denied = await bash({ command: "touch /tmp/kept && rm -f /tmp/kept" }, pex);
      assert.equal(denied.is_error, true);
      assert.match(denied.content, /command policy denies/);
      assert.equal((await airlock.exec(pol.id, { command: "test -e /tmp/kept || echo absent" })).stdout, "absent\n");
      // ask waits for a person in the approval queue, then runs.
      const asked = bash({ command: "git --version >/dev/null 2>&1; echo asked-ran" }, pex);
      let approval;
      for (let i = 0; i < 100 && !approval; i++) {
        approval = (await airlock.approvals.list({ state: "pending" })).find((a) => a.sandbox === pol.id && a.tool === "exec");
        if (!approval) await new Promise((r) => setTimeout(r, 100));
      }
      assert.ok(approval, "the ask reached the approval queue");
      await airlock.approvals.decide(approval.id, { approve: true, reason: "test" });
      const r = await asked;
      assert.equal(r.is_error, undefined, r.content);
      assert.match(r.content, /^asked-ran\n/);
      // No shell was kept.
      const { processes } = await airlock.processes.list(pol.id);
      assert.ok(!processes.some((p) => p.tag === "anthropic-bash-policy"));
    } finally {
      await pex.close();
      await airlock.sandboxes.delete(pol.id);
    }
  });
});

/**
 * A scripted Messages API: each turn checks the request it gets (the
 * tool results the loop sent back) and answers with the next message.
 */
function scriptedServer(turns) {
  const seen = [];
  const failures = [];
  const server = http.createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const reply = (status, obj) => {
        res.writeHead(status, { "content-type": "application/json", "request-id": `req_${seen.length}` });
        res.end(JSON.stringify(obj));
      };
      try {
        assert.equal(req.method, "POST");
        assert.equal(req.url, "/v1/messages");
        // The key travels as x-api-key or, in this SDK's version, as a bearer token.
        assert.ok(req.headers["x-api-key"] === "sk-ant-scripted" || req.headers.authorization === "Bearer sk-ant-scripted", "the API key was sent");
        const msg = JSON.parse(body);
        seen.push(msg);
        const turn = turns[seen.length - 1];
        assert.ok(turn, `no turn ${seen.length} in the script`);
        const content = turn(msg);
        const toolUse = content.some((b) => b.type === "tool_use");
        reply(200, {
          id: `msg_${seen.length}`,
          type: "message",
          role: "assistant",
          model: msg.model,
          content,
          stop_reason: toolUse ? "tool_use" : "end_turn",
          stop_sequence: null,
          usage: { input_tokens: 10, output_tokens: 10 },
        });
      } catch (err) {
        failures.push(err);
        reply(400, { type: "error", error: { type: "invalid_request_error", message: `scripted server: ${err.message}` } });
      }
    });
  });
  return { server, seen, failures };
}

/** The tool results of the last user message, by tool_use id. */
function lastResults(msg) {
  const last = msg.messages.at(-1);
  assert.equal(last.role, "user");
  return new Map(last.content.filter((b) => b.type === "tool_result").map((b) => [b.tool_use_id, b]));
}

describe("agent loop", () => {
  test("the real @anthropic-ai/sdk against a scripted model: write, run, fix, run, a program, answer", async () => {
    const agentEx = new AnthropicExecutor(airlock, sb.id, { sessionId: "agent-loop" });
    const script = `${home}/agent/stats.py`;
    const broken = "import sys\nnums = [int(a) for a in sys.argv[1:]]\nprint('mean:', sum(nums) / len(num))\n";
    const { server, seen, failures } = scriptedServer([
      (msg) => {
        assert.deepEqual(
          msg.tools.map((t) => t.name),
          ["bash", "str_replace_based_edit_tool", "airlock_run_program"],
        );
        assert.equal(msg.messages.length, 1);
        return [
          { type: "text", text: "I'll write the script." },
          { type: "tool_use", id: "toolu_create", name: "str_replace_based_edit_tool", input: { command: "create", path: script, file_text: broken } },
        ];
      },
      (msg) => {
        const r = lastResults(msg).get("toolu_create");
        assert.equal(r.content, `File created successfully at: ${script}`);
        return [{ type: "tool_use", id: "toolu_run1", name: "bash", input: { command: `cd ${home}/agent && python3 stats.py 2 4 9` } }];
      },
      (msg) => {
        const r = lastResults(msg).get("toolu_run1");
        assert.match(r.content, /NameError: name 'num' is not defined/);
        assert.match(r.content, /\[exit status 1\]$/);
        return [
          { type: "text", text: "A typo; fixing it and running again." },
          { type: "tool_use", id: "toolu_fix", name: "str_replace_based_edit_tool", input: { command: "str_replace", path: script, old_str: "len(num)", new_str: "len(nums)" } },
          // The session kept the directory of the cd above.
          { type: "tool_use", id: "toolu_run2", name: "bash", input: { command: "python3 stats.py 2 4 9" } },
        ];
      },
      (msg) => {
        const rs = lastResults(msg);
        assert.deepEqual([...rs.keys()], ["toolu_fix", "toolu_run2"]);
        assert.match(rs.get("toolu_fix").content, /has been edited/);
        assert.equal(rs.get("toolu_run2").content, "mean: 5.0\n");
        assert.equal(rs.get("toolu_run2").is_error, undefined);
        // A program checks the result over more inputs.
        return [
          {
            type: "tool_use",
            id: "toolu_prog",
            name: "airlock_run_program",
            input: { language: "bash", code: `cd ${home}/agent && for a in "1 2" "10 20 30"; do python3 stats.py $a; done` },
          },
        ];
      },
      (msg) => {
        const r = lastResults(msg).get("toolu_prog");
        assert.equal(r.is_error, undefined, r.content);
        assert.equal(r.content, "mean: 1.5\nmean: 20.0\n");
        return [{ type: "text", text: "The mean of 2, 4 and 9 is 5.0." }];
      },
    ]);
    await new Promise((r) => server.listen(0, "127.0.0.1", r));
    try {
      const client = new Anthropic({ apiKey: "sk-ant-scripted", baseURL: `http://127.0.0.1:${server.address().port}`, maxRetries: 0, timeout: 60_000 });
      const messages = [{ role: "user", content: "Write stats.py that prints the mean of its arguments, and run it on 2 4 9." }];
      let final;
      for (let turn = 0; turn < 8; turn++) {
        const res = await client.messages.create({ model: "claude-sonnet-4-6", max_tokens: 2048, tools: AnthropicExecutor.tools, messages });
        messages.push({ role: "assistant", content: res.content });
        if (res.stop_reason !== "tool_use") {
          final = res;
          break;
        }
        messages.push({ role: "user", content: await agentEx.runToolUses(res) });
      }
      assert.deepEqual(failures, []);
      assert.equal(seen.length, 5);
      assert.equal(final?.content[0].text, "The mean of 2, 4 and 9 is 5.0.");
      // The sandbox did the work.
      assert.equal(await airlock.files.readText(sb.id, script), broken.replace("len(num)", "len(nums)"));
      assert.equal((await airlock.exec(sb.id, { command: `python3 ${script} 1 2` })).stdout, "mean: 1.5\n");
    } finally {
      server.close();
      await agentEx.close();
    }
  });
});
