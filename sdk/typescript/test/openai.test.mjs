// The OpenAI tool executor against a real daemon (AIRLOCK_URL,
// AIRLOCK_API_KEY): a multi-turn loop of the real `openai` client and
// one of the real @openai/agents Agent (with AirlockShell and
// AirlockEditor), both against a scripted Responses API server on
// loopback, with the sandbox doing the work; and the edge cases: a
// timeout, a failing command, a patch that does not apply, a program
// run through airlock_run_program, a missing sandbox.

import assert from "node:assert/strict";
import http from "node:http";
import { after, before, describe, test } from "node:test";

import OpenAI from "openai";
import { Agent, OpenAIResponsesModel, applyPatchTool, run, setTracingDisabled, shellTool } from "@openai/agents";

import { Airlock, AirlockEditor, AirlockShell, InvalidArgumentError, NotFoundError, OpenAIExecutor, openaiTools } from "../dist/index.js";

setTracingDisabled(true);

const airlock = new Airlock();
let sb;
let home;

before(async () => {
  sb = await airlock.sandboxes.create({ metadata: { suite: "tssdk-openai" }, limits: { memoryMb: 512 }, timeoutS: 600 });
  home = (await airlock.exec(sb.id, { command: 'printf %s "$HOME"' })).stdout;
});

after(async () => {
  if (sb) await airlock.sandboxes.delete(sb.id);
});

/**
 * A scripted Responses API server: each POST /v1/responses is answered
 * with the output items of the next turn, which also checks the request
 * (recorded in seen). A failed check is answered 400 and kept in
 * failures.
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
        res.writeHead(status, { "content-type": "application/json", "x-request-id": `req_${seen.length}` });
        res.end(JSON.stringify(obj));
      };
      try {
        assert.equal(req.method, "POST");
        assert.equal(req.url, "/v1/responses");
        assert.equal(req.headers.authorization, "Bearer sk-scripted");
        const r = JSON.parse(body);
        seen.push(r);
        const turn = turns[seen.length - 1];
        assert.ok(turn, `no turn ${seen.length} in the script`);
        reply(200, {
          id: `resp_${seen.length}`,
          object: "response",
          created_at: Math.floor(Date.now() / 1000),
          model: r.model,
          status: "completed",
          output: turn(r),
          error: null,
          incomplete_details: null,
          instructions: r.instructions ?? null,
          metadata: {},
          parallel_tool_calls: true,
          tool_choice: "auto",
          tools: r.tools ?? [],
          temperature: 1,
          top_p: 1,
          text: { format: { type: "text" } },
          truncation: "disabled",
          usage: { input_tokens: 10, output_tokens: 10, total_tokens: 20, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } },
        });
      } catch (err) {
        failures.push(err);
        reply(400, { error: { type: "invalid_request_error", message: `scripted server: ${err.message}`, param: null, code: null } });
      }
    });
  });
  return { server, seen, failures };
}

async function listen(server) {
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return new OpenAI({ apiKey: "sk-scripted", baseURL: `http://127.0.0.1:${server.address().port}/v1`, maxRetries: 0, timeout: 60_000 });
}

let seq = 0;
const shellCall = (commands, extra = {}) => ({
  type: "shell_call",
  id: `sh_${++seq}`,
  call_id: `call_sh_${seq}`,
  status: "completed",
  action: { commands, timeout_ms: null, max_output_length: null, ...extra },
});
const patchCall = (operation) => ({ type: "apply_patch_call", id: `apc_${++seq}`, call_id: `call_ap_${seq}`, status: "completed", operation });
const message = (text) => ({ type: "message", id: `msg_${++seq}`, role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] });

/** The items of a request's input answering call_id. */
function answer(req, callId) {
  const items = (Array.isArray(req.input) ? req.input : []).filter((i) => i.call_id === callId && i.type.endsWith("_output"));
  assert.equal(items.length, 1, `one answer to ${callId} in ${JSON.stringify(req.input)}`);
  return items[0];
}

describe("the openai client loop", () => {
  test("create a script with apply_patch, run it, edit it, rerun it", async () => {
    const dir = `${home}/oa-loop`;
    const create = patchCall({ type: "create_file", path: "count.py", diff: "+import sys\n+print(len(sys.argv) - 1)\n" });
    const run1 = shellCall(["python3 count.py one two three", "cat missing.txt", "pwd"]);
    const edit = patchCall({ type: "update_file", path: "count.py", diff: "@@\n import sys\n-print(len(sys.argv) - 1)\n+print('words:', len(sys.argv) - 1)\n" });
    const run2 = shellCall(["python3 count.py a b c d"]);
    const { server, seen, failures } = scriptedServer([
      (r) => {
        assert.deepEqual(
          r.tools.map((t) => t.type),
          ["shell", "apply_patch", "function"],
        );
        assert.equal(r.tools[2].name, "airlock_run_program");
        return [{ type: "reasoning", id: "rs_1", summary: [] }, create];
      },
      (r) => {
        assert.equal(r.previous_response_id, "resp_1");
        assert.deepEqual(answer(r, create.call_id), { type: "apply_patch_call_output", call_id: create.call_id, status: "completed", output: "Created count.py" });
        return [run1];
      },
      (r) => {
        const out = answer(r, run1.call_id);
        assert.equal(out.type, "shell_call_output");
        assert.deepEqual(out.output[0], { stdout: "3\n", stderr: "", outcome: { type: "exit", exit_code: 0 } });
        assert.equal(out.output[1].outcome.exit_code, 1);
        assert.match(out.output[1].stderr, /No such file or directory/);
        assert.equal(out.output[2].stdout, `${dir}\n`);
        return [message("Now with a label."), edit, run2];
      },
      (r) => {
        assert.deepEqual(
          r.input.map((i) => i.call_id),
          [edit.call_id, run2.call_id],
        );
        assert.equal(answer(r, edit.call_id).status, "completed");
        assert.deepEqual(answer(r, run2.call_id).output, [{ stdout: "words: 4\n", stderr: "", outcome: { type: "exit", exit_code: 0 } }]);
        return [message("count.py prints the number of its arguments.")];
      },
    ]);
    const client = await listen(server);
    try {
      const ex = new OpenAIExecutor(airlock, sb.id, { cwd: dir });
      let response = await client.responses.create({ model: "gpt-5.1", input: "Write count.py and run it.", tools: [...openaiTools] });
      for (let turn = 0; turn < 8; turn++) {
        const { input, unhandled } = await ex.runToolCalls(response);
        assert.deepEqual(unhandled, []);
        if (input.length === 0) break;
        response = await client.responses.create({ model: "gpt-5.1", previous_response_id: response.id, input, tools: [...openaiTools] });
      }
      assert.deepEqual(failures, []);
      assert.equal(seen.length, 4);
      assert.equal(response.output_text, "count.py prints the number of its arguments.");
      assert.equal(await airlock.files.readText(sb.id, `${dir}/count.py`), "import sys\nprint('words:', len(sys.argv) - 1)");
    } finally {
      server.close();
    }
  });
});

describe("the @openai/agents loop", () => {
  test("an Agent with AirlockShell and AirlockEditor writes, runs, edits and reruns a script", async () => {
    const dir = `${home}/oa-agents`;
    const create = patchCall({ type: "create_file", path: `${dir}/greet.sh`, diff: "+#!/bin/sh\n+echo \"hello $1\" > greeting.txt\n+cat greeting.txt\n" });
    const run1 = shellCall(["sh greet.sh world"]);
    const edit = patchCall({ type: "update_file", path: `${dir}/greet.sh`, diff: "@@\n #!/bin/sh\n-echo \"hello $1\" > greeting.txt\n+echo \"goodbye $1\" > greeting.txt\n" });
    const run2 = shellCall(["sh greet.sh moon", "exit 3"]);
    const { server, seen, failures } = scriptedServer([
      (r) => {
        assert.deepEqual(
          r.tools.map((t) => t.type),
          ["shell", "apply_patch"],
        );
        return [create];
      },
      (r) => {
        assert.equal(answer(r, create.call_id).status, "completed");
        return [run1];
      },
      (r) => {
        assert.deepEqual(answer(r, run1.call_id).output, [{ stdout: "hello world\n", stderr: "", outcome: { type: "exit", exit_code: 0 } }]);
        return [edit, run2];
      },
      (r) => {
        assert.equal(answer(r, edit.call_id).output, `Updated ${dir}/greet.sh`);
        const out = answer(r, run2.call_id).output;
        assert.equal(out[0].stdout, "goodbye moon\n");
        assert.deepEqual(out[1].outcome, { type: "exit", exit_code: 3 });
        return [message("done")];
      },
    ]);
    const client = await listen(server);
    try {
      const agent = new Agent({
        name: "scripter",
        instructions: "Write and run shell scripts.",
        model: new OpenAIResponsesModel(client, "gpt-5.1"),
        tools: [shellTool({ shell: new AirlockShell(airlock, sb.id, { cwd: dir }) }), applyPatchTool({ editor: new AirlockEditor(airlock, sb.id) })],
      });
      const result = await run(agent, "Write greet.sh, run it, then make it say goodbye.", { maxTurns: 8 });
      assert.deepEqual(failures, []);
      assert.equal(seen.length, 4);
      assert.equal(result.finalOutput, "done");
      // The sandbox did the work.
      assert.equal(await airlock.files.readText(sb.id, `${dir}/greet.sh`), '#!/bin/sh\necho "goodbye $1" > greeting.txt\ncat greeting.txt');
      assert.equal(await airlock.files.readText(sb.id, `${dir}/greeting.txt`), "goodbye moon\n");
    } finally {
      server.close();
    }
  });
});

describe("edge cases", () => {
  const ex = () => new OpenAIExecutor(airlock, sb.id);

  test("a command past its timeout is a timeout outcome and ends the call", async () => {
    const call = shellCall(["sleep 30", "echo never"], { timeout_ms: 1000 });
    const start = Date.now();
    const { input } = await ex().runToolCalls({ output: [call] });
    assert.ok(Date.now() - start < 20_000, "the timeout was applied");
    assert.deepEqual(input, [{ type: "shell_call_output", call_id: call.call_id, max_output_length: 65536, output: [{ stdout: "", stderr: "", outcome: { type: "timeout" } }] }]);
    const shell = new AirlockShell(airlock, sb.id);
    const r = await shell.run({ commands: ["sleep 30"], timeoutMs: 1000 });
    assert.deepEqual(r.output[0].outcome, { type: "timeout" });
  });

  test("a failing command's exit code, and output cut at max_output_length", async () => {
    const { input } = await ex().runToolCalls([shellCall(["echo oops >&2; exit 42", "printf 0123456789"], { max_output_length: 4 })]);
    assert.deepEqual(input[0].output, [
      { stdout: "", stderr: "oops", outcome: { type: "exit", exit_code: 42 } },
      { stdout: "0123", stderr: "", outcome: { type: "exit", exit_code: 0 } },
    ]);
    assert.equal(input[0].max_output_length, 4);
  });

  test("a patch whose context does not match fails and leaves the file alone", async () => {
    const path = `${home}/oa-edge/ctx.txt`;
    await airlock.files.write(sb.id, path, "alpha\nbeta\n");
    const editor = new AirlockEditor(airlock, sb.id);
    const r = await editor.updateFile({ type: "update_file", path, diff: "@@\n-gamma\n+delta\n" });
    assert.equal(r.status, "failed");
    assert.match(r.output, /Invalid Context 0:\ngamma/);
    assert.equal(await airlock.files.readText(sb.id, path), "alpha\nbeta\n");
    const ok = await editor.updateFile({ type: "update_file", path, diff: "@@\n alpha\n-beta\n+gamma\n" });
    assert.deepEqual(ok, { status: "completed", output: `Updated ${path}` });
    assert.equal(await airlock.files.readText(sb.id, path), "alpha\ngamma\n");
    assert.equal((await editor.deleteFile({ type: "delete_file", path })).status, "completed");
    const gone = await editor.deleteFile({ type: "delete_file", path });
    assert.equal(gone.status, "failed");
  });

  test("airlock_run_program runs a program; other functions are left to the caller", async () => {
    const prog = { type: "function_call", id: "fc_1", call_id: "call_prog", name: "airlock_run_program", arguments: JSON.stringify({ language: "python", code: "print(6 * 7)", timeout_s: null }) };
    const mine = { type: "function_call", id: "fc_2", call_id: "call_mine", name: "get_weather", arguments: "{}" };
    const { input, unhandled } = await ex().runToolCalls({ output: [mine, prog] });
    assert.deepEqual(unhandled, ["call_mine"]);
    assert.equal(input.length, 1);
    assert.equal(input[0].type, "function_call_output");
    assert.equal(input[0].call_id, "call_prog");
    const out = JSON.parse(input[0].output);
    assert.equal(out.stdout, "42\n");
    assert.equal(out.exit_code, 0);
  });

  test("a missing sandbox is a NotFoundError; a malformed call a failure; bad input an InvalidArgumentError", async () => {
    await assert.rejects(new OpenAIExecutor(airlock, "sb-aaaaaaaaaaaaaaaa").runToolCalls([shellCall(["true"])]), NotFoundError);
    await assert.rejects(ex().runToolCalls([{ type: "shell_call", action: { commands: ["true"] } }]), (e) => e instanceof InvalidArgumentError && /call_id is required/.test(e.message));
    await assert.rejects(ex().runToolCalls("nope"), InvalidArgumentError);
    assert.throws(() => new OpenAIExecutor(airlock, sb.id, { timeoutMs: 0 }), InvalidArgumentError);
    const { input } = await ex().runToolCalls([shellCall([])]);
    assert.match(input[0].output[0].stderr, /no commands/);
  });
});
