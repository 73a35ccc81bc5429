// Regenerates v4a_cases.json: each case's expected result from the
// reference applyDiff of @openai/agents-core. Run from sdk/typescript:
//   node ../../internal/toolexec/openai/testdata/v4a_gen.mjs > ../../internal/toolexec/openai/testdata/v4a_cases.json
import { createRequire } from 'node:module';

const { applyDiff } = createRequire(process.cwd() + '/')('@openai/agents-core');

const cases = [
  { name: 'create', input: '', diff: '+a\n+b\n', create: true },
  { name: 'create empty line', input: '', diff: '+#!/bin/sh\n+\n+echo hi\n', create: true },
  { name: 'create crlf diff', input: '', diff: '+a\r\n+b\r\n', create: true },
  { name: 'create bad line', input: '', diff: '+a\nb\n', create: true },
  { name: 'create stops at end patch', input: '', diff: '+a\n*** End Patch\n+b\n', create: true },
  { name: 'replace', input: 'a\nb\nc\n', diff: '@@\n a\n-b\n+B\n c\n' },
  { name: 'no anchor line', input: 'a\nb\nc\n', diff: ' a\n-b\n+B\n' },
  { name: 'anchor', input: 'def f():\n    return 1\n\ndef g():\n    return 1\n', diff: '@@ def g():\n-    return 1\n+    return 2\n' },
  { name: 'two anchors', input: 'class A:\n  def f():\n    x = 1\nclass B:\n  def f():\n    x = 1\n', diff: '@@ class B:\n@@   def f():\n-    x = 1\n+    x = 2\n' },
  { name: 'missing anchor required', input: 'class A:\n  x = 1\n', diff: '@@ class A:\n@@ def nope():\n-  x = 1\n+  x = 2\n' },
  { name: 'missing anchor ignored', input: 'a\nb\n', diff: '@@ nope\n a\n-b\n+c\n' },
  { name: 'trimmed anchor', input: '  def g():\n    return 1\n', diff: '@@ def g():\n-    return 1\n+    return 2\n' },
  { name: 'context mismatch', input: 'a\nb\n', diff: '@@\n x\n-y\n+z\n' },
  { name: 'crlf kept', input: 'a\r\nb\r\n', diff: '@@\n a\n-b\n+c\n' },
  { name: 'mixed endings', input: 'a\r\nb\nc\n', diff: '@@\n-b\n+B\n' },
  { name: 'trailing space fuzz', input: 'a  \nb\n', diff: ' a\n-b\n+c\n' },
  { name: 'indent fuzz', input: '    a\nb\n', diff: ' a\n-b\n+c\n' },
  { name: 'eof', input: 'x\ny\nx\ny\n', diff: '@@\n x\n-y\n+z\n*** End of File\n' },
  { name: 'eof fallback', input: 'x\ny\nq\n', diff: '@@\n x\n-y\n+z\n*** End of File\n' },
  { name: 'eof mismatch', input: 'x\ny\n', diff: '@@\n k\n-y\n+z\n*** End of File\n' },
  { name: 'star line', input: 'a\nb\n', diff: '@@\n a\n*** bogus\n' },
  { name: 'bad prefix', input: 'a\nb\n', diff: '@@\nxa\n' },
  { name: 'empty line is context', input: 'a\n\nb\n', diff: '@@\n a\n\n-b\n+c\n' },
  { name: 'nothing in section', input: 'a\n', diff: '@@\n' },
  { name: 'second section without anchor', input: 'a\nb\nc\n', diff: ' a\n-b\n+B\n***\n c\n' },
  { name: 'two sections', input: '1\n2\n3\n4\n5\n6\n', diff: '@@\n 1\n-2\n+two\n@@\n 5\n-6\n+six\n' },
  { name: 'add only at start', input: 'a\n', diff: '@@\n+first\n a\n' },
  { name: 'delete all', input: 'a\nb', diff: '@@\n-a\n-b\n' },
  { name: 'no trailing newline', input: 'a\nb', diff: '@@\n a\n-b\n+c\n' },
  { name: 'update file marker ends', input: 'a\nb\n', diff: '@@\n a\n-b\n+c\n*** Update File: other\n@@\n-zzz\n' },
  { name: 'unicode trim', input: '\u00a0a\nb\n', diff: ' a\n-b\n+c\n' },
  { name: 'bom trim', input: '\ufeffa\nb\n', diff: ' a\n-b\n+c\n' },
  { name: 'interleaved', input: 'a\nb\nc\nd\n', diff: '@@\n a\n-b\n+B\n c\n-d\n+D\n' },
  { name: 'backwards anchor', input: 'f\na\nf\nb\n', diff: '@@\n f\n-a\n+A\n@@ f\n-b\n+B\n' },
];

const out = cases.map((c) => {
  try {
    return { ...c, create: !!c.create, want: applyDiff(c.input, c.diff, c.create ? 'create' : 'default') };
  } catch (e) {
    return { ...c, create: !!c.create, err: e.message };
  }
});
console.log(JSON.stringify(out, null, 1));
