// Drives Airlock's /mcp with the official TypeScript SDK over Streamable
// HTTP: the SDK's newest protocol revision and an older one, tools with
// schemas and annotations, a scope-limited key that is not offered the
// sandbox-writing tools, a sandbox created and used (code with state and a
// chart as image content, files written, edited and read, commands with
// increasing progress), refusals of an unknown tool and of arguments
// against the schema. Steps that need no sandbox come first.
//
// Environment: MCP_URL (http://HOST:PORT/mcp), AIRLOCK_API_KEY (a key with
// every scope), MCP_LIMITED_KEY (sandboxes:read, exec, files).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import { step, check, eq, ok, refused, text, onFailure, requireEnv, Skip } from './harness.mjs';

const env = requireEnv('MCP_URL', 'AIRLOCK_API_KEY', 'MCP_LIMITED_KEY');

const ALL_TOOLS = ['create_sandbox', 'destroy_sandbox', 'edit_file', 'execute_program', 'get_tool_result', 'list_files', 'list_sandboxes', 'read_file', 'run_code', 'run_command', 'write_file'];

// increasing checks progress notifications as the spec has them: each
// with a progress value greater than the one before.
function increasing(progress) {
  for (let i = 0; i < progress.length; i++) {
    check(typeof progress[i].progress === 'number', `progress ${i}: ${JSON.stringify(progress[i])}`);
    check(i === 0 || progress[i].progress > progress[i - 1].progress,
      `progress values must increase: ${JSON.stringify(progress.map((p) => p.progress))}`);
  }
}

// connect opens a session with key; wrap, when given, wraps the transport
// (to change what the client sends).
async function connect(key, wrap) {
  const transport = new StreamableHTTPClientTransport(new URL(env.MCP_URL), {
    requestInit: { headers: { Authorization: 'Bearer ' + key } },
  });
  const client = new Client({ name: 'airlock-sdktest', version: '1.0.0' });
  await client.connect(wrap ? wrap(transport) : transport);
  return { client, transport };
}

const { client, transport } = await step('connect', async () => {
  const s = await connect(env.AIRLOCK_API_KEY);
  // The SDK asks for its newest revision, and the server must agree to it.
  eq(s.transport.protocolVersion, LATEST_PROTOCOL_VERSION, 'negotiated protocol version');
  eq(s.client.getServerVersion()?.name, 'airlock', 'server name');
  check(s.client.getServerCapabilities()?.tools, 'the server does not declare tools');
  return s;
});
onFailure(() => client.close());
console.log(`# protocol ${transport.protocolVersion} (the SDK's newest: ${LATEST_PROTOCOL_VERSION})`);

await step('listTools', async () => {
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  eq(JSON.stringify(Object.keys(byName).sort()), JSON.stringify(ALL_TOOLS), 'tools');
  for (const t of tools) {
    eq(t.inputSchema?.type, 'object', `${t.name} inputSchema.type`);
    // get_tool_result answers with whatever the polled tool returns.
    if (t.name !== 'get_tool_result') eq(t.outputSchema?.type, 'object', `${t.name} outputSchema.type`);
    check(t.description, `${t.name} has no description`);
  }
  eq(byName.destroy_sandbox.annotations?.destructiveHint, true, 'destroy_sandbox destructiveHint');
  eq(byName.read_file.annotations?.readOnlyHint, true, 'read_file readOnlyHint');
  eq(byName.list_sandboxes.annotations?.readOnlyHint, true, 'list_sandboxes readOnlyHint');
  eq(byName.run_command.annotations?.openWorldHint, true, 'run_command openWorldHint');
  check(byName.run_command.inputSchema.required?.includes('command'), 'run_command does not require command');
});

// An older revision the SDK also speaks: the initialize request asks for
// it, and the server answers in it.
await step('protocol 2025-06-18', async () => {
  const older = '2025-06-18';
  const s = await connect(env.AIRLOCK_API_KEY, (t) => {
    const send = t.send.bind(t);
    t.send = (msg, opts) => send(msg.method === 'initialize' ? { ...msg, params: { ...msg.params, protocolVersion: older } } : msg, opts);
    return t;
  });
  try {
    eq(s.transport.protocolVersion, older, 'negotiated protocol version');
    const { tools } = await s.client.listTools();
    eq(tools.length, ALL_TOOLS.length, 'tools');
    ok(await s.client.callTool({ name: 'list_sandboxes', arguments: {} }), 'list_sandboxes');
  } finally {
    await s.client.close();
  }
});

await step('limited key is not offered destructive tools', async () => {
  const s = await connect(env.MCP_LIMITED_KEY);
  try {
    const names = (await s.client.listTools()).tools.map((t) => t.name);
    check(!names.includes('destroy_sandbox'), `destroy_sandbox offered: ${names}`);
    check(!names.includes('create_sandbox'), `create_sandbox offered: ${names}`);
    check(names.includes('run_command') && names.includes('read_file') && names.includes('list_sandboxes'), `tools: ${names}`);
    const msg = await refused(() => s.client.callTool({ name: 'destroy_sandbox', arguments: { sandbox_id: 'sb-x' } }), 'destroy_sandbox');
    check(/destroy_sandbox/.test(msg), `message: ${msg}`);
    console.log(`# limited destroy_sandbox: ${msg}`);
    // Without a default sandbox, and unable to create one, it must name one.
    const res = await s.client.callTool({ name: 'run_command', arguments: { command: 'true' } });
    eq(res.isError, true, 'run_command without sandbox_id: isError');
    check(/sandbox_id/.test(text(res)), `run_command without sandbox_id: ${text(res)}`);
  } finally {
    await s.client.close();
  }
});

let sandboxId;
await step('create_sandbox', async () => {
  const sc = ok(await client.callTool({ name: 'create_sandbox', arguments: { metadata: { suite: 'mcp-sdk-http' } } }), 'create_sandbox');
  check(typeof sc.sandbox_id === 'string' && sc.sandbox_id !== '', `no sandbox_id: ${JSON.stringify(sc)}`);
  eq(sc.default, true, 'default');
  eq(sc.state, 'running', 'state');
  sandboxId = sc.sandbox_id;
});
onFailure(() => client.callTool({ name: 'destroy_sandbox', arguments: { sandbox_id: sandboxId } }));

await step('run_code keeps state', async () => {
  // Without sandbox_id: the default sandbox, the one just created.
  const first = ok(await client.callTool({ name: 'run_code', arguments: { code: 'x = 41' } }), 'x = 41');
  eq(first.sandbox_id, sandboxId, 'the default sandbox');
  const res = await client.callTool({ name: 'run_code', arguments: { code: 'x + 1', sandbox_id: sandboxId } });
  const sc = ok(res, 'x + 1');
  check(sc.results.some((r) => r.text === '42'), `results: ${JSON.stringify(sc.results)}`);
  check(text(res).includes('42'), `text content: ${text(res)}`);
});

await step('run_code error', async () => {
  const res = await client.callTool({ name: 'run_code', arguments: { code: '1/0' } });
  eq(res.isError, true, 'isError');
  check(text(res).includes('ZeroDivisionError'), `text: ${text(res)}`);
});

await step('run_code chart as image', async () => {
  const probe = await client.callTool({ name: 'run_code', arguments: { code: 'import matplotlib' } });
  if (probe.isError && /ModuleNotFoundError/.test(text(probe))) throw new Skip('matplotlib is not in the template');
  const code = "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()";
  const res = await client.callTool({ name: 'run_code', arguments: { code } });
  const sc = ok(res, 'chart');
  const images = res.content.filter((c) => c.type === 'image');
  eq(images.length, 1, 'image content blocks');
  eq(images[0].mimeType, 'image/png', 'mimeType');
  const png = Buffer.from(images[0].data, 'base64');
  check(png.length > 100 && png.subarray(1, 4).toString() === 'PNG', `not a PNG (${png.length} bytes)`);
  check(sc.results.some((r) => r.image === 'image/png'), `results: ${JSON.stringify(sc.results)}`);
});

await step('write_file', async () => {
  const sc = ok(await client.callTool({ name: 'write_file', arguments: { path: 'notes.txt', content: 'alpha beta\nbeta gamma\n' } }), 'write_file');
  eq(sc.size, 22, 'size');
  check(/^[0-9a-f]{64}$/.test(sc.sha256), `sha256: ${sc.sha256}`);
});

await step('edit_file ambiguous', async () => {
  const res = await client.callTool({ name: 'edit_file', arguments: { path: 'notes.txt', old_str: 'beta', new_str: 'BETA' } });
  eq(res.isError, true, 'isError');
  check(text(res).includes('appears 2 times'), `text: ${text(res)}`);
});

await step('edit_file unique', async () => {
  const sc = ok(await client.callTool({ name: 'edit_file', arguments: { path: 'notes.txt', old_str: 'beta gamma', new_str: 'delta' } }), 'edit_file');
  eq(sc.replacements, 1, 'replacements');
});

await step('read_file shows the edit', async () => {
  const sc = ok(await client.callTool({ name: 'read_file', arguments: { path: 'notes.txt', sandbox_id: sandboxId } }), 'read_file');
  eq(sc.content, 'alpha beta\ndelta\n', 'content');
  eq(sc.encoding, 'utf-8', 'encoding');
});

await step('list_files', async () => {
  const sc = ok(await client.callTool({ name: 'list_files', arguments: {} }), 'list_files');
  check(sc.entries.some((e) => e.name === 'notes.txt' && e.type === 'file'), `entries: ${JSON.stringify(sc.entries)}`);
});

await step('run_command progress', async () => {
  const progress = [];
  const res = await client.callTool(
    { name: 'run_command', arguments: { command: 'for i in 1 2 3 4; do echo line$i; sleep 0.6; done; exit 3' } },
    undefined,
    { onprogress: (p) => progress.push(p) },
  );
  const sc = ok(res, 'run_command');
  eq(sc.exit_code, 3, 'exit_code');
  eq(sc.stdout, 'line1\nline2\nline3\nline4\n', 'stdout');
  eq(sc.sandbox_id, sandboxId, 'sandbox_id');
  check(progress.length >= 1, 'no progress notification from a 2.4 s command');
  increasing(progress);
  console.log(`# ${progress.length} progress notifications: ${JSON.stringify(progress.map((p) => [p.progress, p.message]))}`);
});

await step('unknown tool is refused', async () => {
  const msg = await refused(() => client.callTool({ name: 'no_such_tool', arguments: {} }), 'unknown tool');
  check(/no_such_tool|unknown tool|not found/i.test(msg), `message: ${msg}`);
  console.log(`# unknown tool: ${msg}`);
});

await step('schema-violating arguments are refused', async () => {
  const msg = await refused(() => client.callTool({ name: 'run_command', arguments: { command: 7 } }), 'command: 7');
  check(/command/i.test(msg), `message: ${msg}`);
  console.log(`# command: 7: ${msg}`);
  const missing = await refused(() => client.callTool({ name: 'read_file', arguments: { sandbox_id: sandboxId } }), 'read_file without path');
  check(/path/i.test(missing), `message: ${missing}`);
  console.log(`# read_file without path: ${missing}`);
});

await step('run_command progress without newlines', async () => {
  // Output in pieces without a newline (a progress bar, say) still
  // advances the progress value.
  const progress = [];
  const res = await client.callTool(
    { name: 'run_command', arguments: { command: 'for i in 1 2 3 4; do printf .; sleep 0.6; done' } },
    undefined,
    { onprogress: (p) => progress.push(p) },
  );
  eq(ok(res, 'run_command').stdout, '....', 'stdout');
  check(progress.length >= 2, `${progress.length} progress notifications from a 2.4 s command`);
  increasing(progress);
});

await step('destroy_sandbox', async () => {
  const sc = ok(await client.callTool({ name: 'destroy_sandbox', arguments: { sandbox_id: sandboxId } }), 'destroy_sandbox');
  eq(sc.destroyed, true, 'destroyed');
  const list = ok(await client.callTool({ name: 'list_sandboxes', arguments: {} }), 'list_sandboxes');
  check(!list.sandboxes.some((s) => s.sandbox_id === sandboxId), `still listed: ${JSON.stringify(list)}`);
});
await client.close();

