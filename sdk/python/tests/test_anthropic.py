"""The Anthropic tool executor against a real daemon (AIRLOCK_URL,
AIRLOCK_API_KEY), which runs the tools (internal/toolexec/anthropic):
bash state across calls and its restart, the editor's documented errors
and ranges, the program tool, an unknown tool, a missing sandbox, and
the asyncio twin.
"""

from __future__ import annotations

import asyncio
import os
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
    SB = client.create_sandbox(metadata={"suite": "pysdk-anthropic"}, timeout=600).id
    HOME = client.exec(SB, 'printf %s "$HOME"').stdout_text


def tearDownModule() -> None:
    if SB:
        client.delete_sandbox(SB)


_seq = 0


def use(name: str, inp: object) -> dict:
    global _seq
    _seq += 1
    return {"type": "tool_use", "id": "toolu_py_%d" % _seq, "name": name, "input": inp}


class AnthropicExecutorTest(unittest.TestCase):
    def setUp(self) -> None:
        self.ex = airlock.AnthropicExecutor(client, SB)

    def tearDown(self) -> None:
        self.ex.close()

    def one(self, name: str, inp: object, ex: airlock.AnthropicExecutor = None) -> dict:
        u = use(name, inp)
        [r] = (ex or self.ex).run_tool_uses({"role": "assistant", "content": [u]})
        self.assertEqual(r["type"], "tool_result")
        self.assertEqual(r["tool_use_id"], u["id"])
        return r

    def test_bash_state_and_restart(self) -> None:
        self.assertEqual(self.one("bash", {"command": "cd /tmp && export PYVAR=kept"})["content"], "(no output)")
        self.assertEqual(self.one("bash", {"command": 'pwd; echo "$PYVAR"'})["content"], "/tmp\nkept\n")
        failed = self.one("bash", {"command": "echo nope >&2; false"})
        self.assertNotIn("is_error", failed)
        self.assertEqual(failed["content"], "nope\n\n[exit status 1]")
        # Another executor has its own shell.
        other = airlock.AnthropicExecutor(client, SB)
        try:
            self.assertEqual(self.one("bash", {"command": 'echo "[$PYVAR]"'}, other)["content"], "[]\n")
        finally:
            other.close()
        r = self.one("bash", {"restart": True})
        self.assertNotIn("is_error", r)
        self.assertIn("restarted", r["content"])
        self.assertEqual(self.one("bash", {"command": 'pwd; echo "[$PYVAR]"'})["content"], HOME + "\n[]\n")

    def test_editor(self) -> None:
        path = HOME + "/py/ed.txt"
        c = self.one("str_replace_based_edit_tool", {"command": "create", "path": path, "file_text": "a = 1\nb = 1\nc\n"})
        self.assertEqual(c["content"], "File created successfully at: " + path)
        v = self.one("str_replace_based_edit_tool", {"command": "view", "path": path, "view_range": [2, 3]})
        self.assertEqual(v["content"], "Here's the result of running `cat -n` on %s:\n     2\tb = 1\n     3\tc\n" % path)
        bad = self.one("str_replace_based_edit_tool", {"command": "view", "path": path, "view_range": [0, 1]})
        self.assertTrue(bad["is_error"])
        self.assertIn("Its first element `0` should be within the range of lines of the file: [1, 3]", bad["content"])
        none = self.one("str_replace_based_edit_tool", {"command": "str_replace", "path": path, "old_str": "zz", "new_str": "y"})
        self.assertEqual((none["is_error"], none["content"]),
                         (True, "No match found for replacement. Please check your text and try again."))
        many = self.one("str_replace_based_edit_tool", {"command": "str_replace", "path": path, "old_str": " = 1", "new_str": " = 2"})
        self.assertEqual((many["is_error"], many["content"]),
                         (True, "Found 2 matches for replacement text. Please provide more context to make a unique match."))
        ok = self.one("str_replace_based_edit_tool", {"command": "str_replace", "path": path, "old_str": "b = 1", "new_str": "b = 2"})
        self.assertNotIn("is_error", ok)
        self.assertEqual(client.read_bytes(SB, path), b"a = 1\nb = 2\nc\n")

    def test_program_unknown_and_order(self) -> None:
        blocks = [
            {"type": "text", "text": "thinking"},
            use(airlock.PROGRAM_TOOL, {"language": "python", "code": "print(6 * 7)"}),
            use("web_search", {"query": "x"}),
            use(airlock.PROGRAM_TOOL, {"language": "bash", "code": "echo out; echo err >&2; exit 2"}),
        ]
        rs = self.ex.run_tool_uses({"content": blocks})
        self.assertEqual([r["tool_use_id"] for r in rs], [b["id"] for b in blocks[1:]])
        self.assertEqual(rs[0], {"type": "tool_result", "tool_use_id": blocks[1]["id"], "content": "42\n"})
        self.assertTrue(rs[1]["is_error"])
        self.assertIn('Unknown tool "web_search"', rs[1]["content"])
        self.assertEqual(rs[2]["content"], "out\n[stderr]\nerr\n[exit status 2]")
        self.assertEqual([t.get("type", t["name"]) for t in airlock.ANTHROPIC_TOOLS],
                         ["bash_20250124", "text_editor_20250728", "airlock_run_program"])

    def test_errors(self) -> None:
        with self.assertRaises(airlock.NotFoundError):
            airlock.AnthropicExecutor(client, "sb-" + "a" * 16).run_tool_uses({"content": [use("bash", {"command": "true"})]})
        with self.assertRaises(airlock.InvalidArgumentError):
            self.ex.run_tool_uses({"role": "assistant"})
        with self.assertRaises(airlock.InvalidArgumentError):
            airlock.AnthropicExecutor(client, SB, session_id="a b")
        self.assertEqual(self.ex.run_tool_uses({"content": [{"type": "text", "text": "no tools"}]}), [])

    def test_message_object(self) -> None:
        # An object with .content, as the anthropic package's Message.
        class Block:
            def __init__(self, d: dict) -> None:
                self.d = d

            def model_dump(self) -> dict:
                return self.d

        class Message:
            content = [Block(use("bash", {"command": "echo obj"}))]

        [r] = self.ex.run_tool_uses(Message())
        self.assertEqual(r["content"], "obj\n")

    def test_async(self) -> None:
        async def main() -> list:
            async with airlock.AsyncClient(timeout=30) as ac:
                async with airlock.AsyncAnthropicExecutor(ac, SB, session_id="py-async") as ex:
                    await ex.run_tool_uses([use("bash", {"command": "export A=1"})])
                    return await ex.run_tool_uses([use("bash", {"command": 'echo "a=$A"'})])

        [r] = asyncio.run(main())
        self.assertEqual(r["content"], "a=1\n")
        procs = client.list_processes(SB).processes
        self.assertFalse([p for p in procs if p.tag == "anthropic-bash-py-async"], "close ended the shell")


if __name__ == "__main__":
    unittest.main()
