"""The OpenAI tool executor against a real daemon (AIRLOCK_URL,
AIRLOCK_API_KEY), which runs the calls (internal/toolexec/openai): a
scripted multi-turn loop (apply_patch creates a script, the shell runs
it, a patch edits it, the shell reruns it), the local shell tool, a
timeout, a failing command, a patch that does not apply,
airlock_run_program and functions left to the caller, a missing
sandbox, a response object with .output, and the asyncio twin.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import unittest

import airlock

URL = os.environ.get("AIRLOCK_URL", "")
KEY = os.environ.get("AIRLOCK_API_KEY", "")

SB = ""
HOME = ""
client: airlock.Client


def setUpModule() -> None:
    global SB, HOME, client
    if not URL or not KEY:
        raise unittest.SkipTest("AIRLOCK_URL and AIRLOCK_API_KEY name the daemon to test against")
    client = airlock.Client(timeout=30)
    SB = client.create_sandbox(metadata={"suite": "pysdk-openai"}, timeout=600).id
    HOME = client.exec(SB, 'printf %s "$HOME"').stdout_text


def tearDownModule() -> None:
    if SB:
        client.delete_sandbox(SB)


_seq = 0


def _id(prefix: str) -> str:
    global _seq
    _seq += 1
    return "%s_py_%d" % (prefix, _seq)


def shell_call(commands, **action) -> dict:
    return {"type": "shell_call", "id": _id("sh"), "call_id": _id("call"), "status": "completed",
            "action": {"commands": commands, "timeout_ms": None, "max_output_length": None, **action}}


def patch_call(operation: dict) -> dict:
    return {"type": "apply_patch_call", "id": _id("apc"), "call_id": _id("call"), "status": "completed",
            "operation": operation}


def answer(inp: list, call: dict) -> dict:
    [a] = [i for i in inp if i.get("call_id", i.get("id")) == call["call_id"]]
    return a


class OpenAIExecutorTest(unittest.TestCase):
    def setUp(self) -> None:
        self.ex = airlock.OpenAIExecutor(client, SB)

    def test_loop(self) -> None:
        """A scripted model's turns: each response's calls run in the
        sandbox and the next turn checks their outputs."""
        d = HOME + "/py-oa"
        ex = airlock.OpenAIExecutor(client, SB, cwd=d)
        create = patch_call({"type": "create_file", "path": "mean.py",
                             "diff": "+import sys\n+xs = [int(a) for a in sys.argv[1:]]\n+print(sum(xs) / len(x))\n"})
        run1 = shell_call(["python3 mean.py 2 4 9"])
        fix = patch_call({"type": "update_file", "path": "mean.py",
                          "diff": "@@\n xs = [int(a) for a in sys.argv[1:]]\n-print(sum(xs) / len(x))\n+print(sum(xs) / len(xs))\n"})
        run2 = shell_call(["python3 mean.py 2 4 9"])
        turns = [[{"type": "reasoning", "id": "rs_1", "summary": []}, create], [run1], [fix, run2]]
        inputs = []
        for output in turns:
            out = ex.run_tool_calls({"id": "resp", "object": "response", "output": output})
            self.assertEqual(out["unhandled"], [])
            inputs.append(out["input"])
        self.assertEqual(inputs[0], [{"type": "apply_patch_call_output", "call_id": create["call_id"],
                                      "status": "completed", "output": "Created mean.py"}])
        r1 = answer(inputs[1], run1)["output"][0]
        self.assertEqual(r1["outcome"], {"type": "exit", "exit_code": 1})
        self.assertIn("NameError: name 'x' is not defined", r1["stderr"])
        self.assertEqual([i["call_id"] for i in inputs[2]], [fix["call_id"], run2["call_id"]])
        self.assertEqual(answer(inputs[2], fix)["status"], "completed")
        self.assertEqual(answer(inputs[2], run2)["output"],
                         [{"stdout": "5.0\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}])
        # The sandbox did the work.
        self.assertEqual(client.exec(SB, "python3 %s/mean.py 1 2" % d).stdout_text, "1.5\n")

    def test_local_shell(self) -> None:
        call = {"type": "local_shell_call", "id": "ls_1", "call_id": _id("call"), "status": "completed",
                "action": {"type": "exec", "command": ["sh", "-c", "echo $GREETING; pwd; exit 4"],
                           "env": {"GREETING": "hi"}, "timeout_ms": 5000, "working_directory": "/tmp", "user": None}}
        [a] = self.ex.run_tool_calls([call])["input"]
        self.assertEqual(a["type"], "local_shell_call_output")
        self.assertEqual(a["id"], call["call_id"])
        res = json.loads(a["output"])
        self.assertEqual(res["output"], "hi\n/tmp\n")
        self.assertEqual(res["metadata"]["exit_code"], 4)

    def test_timeout_and_failure(self) -> None:
        start = time.monotonic()
        call = shell_call(["sleep 30", "echo never"], timeout_ms=1000)
        [a] = self.ex.run_tool_calls([call])["input"]
        self.assertLess(time.monotonic() - start, 20)
        self.assertEqual(a["output"], [{"stdout": "", "stderr": "", "outcome": {"type": "timeout"}}])
        [b] = self.ex.run_tool_calls([shell_call(["echo bad >&2; exit 9"])])["input"]
        self.assertEqual(b["output"], [{"stdout": "", "stderr": "bad\n", "outcome": {"type": "exit", "exit_code": 9}}])

    def test_patch_that_does_not_apply(self) -> None:
        path = HOME + "/py-oa-edge/ctx.txt"
        client.write_file(SB, path, b"one\ntwo\n")
        call = patch_call({"type": "update_file", "path": path, "diff": "@@\n-three\n+four\n"})
        [a] = self.ex.run_tool_calls([call])["input"]
        self.assertEqual(a["status"], "failed")
        self.assertIn("Invalid Context 0:\nthree", a["output"])
        with client.read_file(SB, path) as r:
            self.assertEqual(r.read(), b"one\ntwo\n")

    def test_program_and_unhandled(self) -> None:
        prog = {"type": "function_call", "id": "fc_1", "call_id": _id("call"), "name": "airlock_run_program",
                "arguments": json.dumps({"language": "bash", "code": "echo $((6 * 7))", "timeout_s": None})}
        mine = {"type": "function_call", "id": "fc_2", "call_id": _id("call"), "name": "lookup", "arguments": "{}"}
        out = self.ex.run_tool_calls({"output": [prog, mine]})
        self.assertEqual(out["unhandled"], [mine["call_id"]])
        [a] = out["input"]
        self.assertEqual((a["type"], a["call_id"]), ("function_call_output", prog["call_id"]))
        self.assertEqual(json.loads(a["output"])["stdout"], "42\n")

    def test_response_object(self) -> None:
        """An object with .output whose items have to_dict, as the openai
        package's Response has."""

        class Item:
            def __init__(self, d: dict) -> None:
                self.d = d

            def to_dict(self) -> dict:
                return self.d

        class Response:
            def __init__(self, items: list) -> None:
                self.output = [Item(i) for i in items]

        call = shell_call(["echo from-object"])
        [a] = self.ex.run_tool_calls(Response([call]))["input"]
        self.assertEqual(a["output"][0]["stdout"], "from-object\n")

    def test_errors(self) -> None:
        with self.assertRaises(airlock.NotFoundError):
            airlock.OpenAIExecutor(client, "sb-aaaaaaaaaaaaaaaa").run_tool_calls([shell_call(["true"])])
        with self.assertRaises(airlock.InvalidArgumentError):
            self.ex.run_tool_calls({"id": "no output"})
        with self.assertRaisesRegex(airlock.InvalidArgumentError, "call_id is required"):
            self.ex.run_tool_calls([{"type": "shell_call", "action": {"commands": ["true"]}}])
        with self.assertRaises(airlock.InvalidArgumentError):
            airlock.OpenAIExecutor(client, SB, timeout_ms=0)
        self.assertEqual(airlock.OpenAIExecutor.tools[0], {"type": "shell", "environment": {"type": "local"}})


class AsyncOpenAIExecutorTest(unittest.TestCase):
    def test_async(self) -> None:
        async def main() -> dict:
            async with airlock.AsyncClient(timeout=30) as ac:
                ex = airlock.AsyncOpenAIExecutor(ac, SB)
                return await ex.run_tool_calls([shell_call(["echo async"])])

        out = asyncio.run(main())
        self.assertEqual(out["input"][0]["output"][0]["stdout"], "async\n")


if __name__ == "__main__":
    unittest.main()
