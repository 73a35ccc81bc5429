// Drives `airlock mcp` (stdio, a client of a running daemon) with the
// official TypeScript SDK's StdioClientTransport: the tools, a command in
// the default sandbox it creates, that sandbox listed and destroyed.
//
// Environment: AIRLOCK_BIN (the airlock binary), AIRLOCK_URL and
// AIRLOCK_API_KEY (a key with every scope), passed on to airlock mcp.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { step, check, eq, ok, refused, onFailure, requireEnv } from './harness.mjs';

const env = requireEnv('AIRLOCK_BIN', 'AIRLOCK_URL', 'AIRLOCK_API_KEY');

const client = new Client({ name: 'airlock-sdktest-stdio', version: '1.0.0' });
const transport = new StdioClientTransport({
  command: env.AIRLOCK_BIN,
  args: ['mcp'],
  env: { AIRLOCK_URL: env.AIRLOCK_URL, AIRLOCK_API_KEY: env.AIRLOCK_API_KEY },
  stderr: 'pipe',
});
let stderr = '';
transport.stderr?.on('data', (b) => { stderr += b; });
onFailure(async () => {
  if (stderr) console.log(`# airlock mcp stderr:\n${stderr}`);
});

await step('connect', async () => {
  await client.connect(transport);
  eq(client.getServerVersion()?.name, 'airlock', 'server name');
});
onFailure(() => client.close());

await step('listTools', async () => {
  const names = (await client.listTools()).tools.map((t) => t.name).sort();
  eq(names.length, 11, `tools ${names}`);
  check(names.includes('run_command') && names.includes('destroy_sandbox'), `tools: ${names}`);
});

let sandboxId;
await step('run_command echo hi', async () => {
  const sc = ok(await client.callTool({ name: 'run_command', arguments: { command: 'echo hi' } }), 'run_command');
  eq(sc.stdout, 'hi\n', 'stdout');
  eq(sc.exit_code, 0, 'exit_code');
  check(sc.sandbox_id, `no sandbox_id: ${JSON.stringify(sc)}`);
  sandboxId = sc.sandbox_id;
});
onFailure(() => client.callTool({ name: 'destroy_sandbox', arguments: { sandbox_id: sandboxId } }));

await step('list_sandboxes has it', async () => {
  const sc = ok(await client.callTool({ name: 'list_sandboxes', arguments: {} }), 'list_sandboxes');
  const sb = sc.sandboxes.find((s) => s.sandbox_id === sandboxId);
  check(sb, `${sandboxId} not listed: ${JSON.stringify(sc)}`);
  eq(sb.default, true, 'default');
});

await step('unknown tool is refused', async () => {
  const msg = await refused(() => client.callTool({ name: 'no_such_tool', arguments: {} }), 'unknown tool');
  check(/no_such_tool|unknown tool|not found/i.test(msg), `message: ${msg}`);
});

await step('destroy_sandbox', async () => {
  const sc = ok(await client.callTool({ name: 'destroy_sandbox', arguments: { sandbox_id: sandboxId } }), 'destroy_sandbox');
  eq(sc.destroyed, true, 'destroyed');
  const list = ok(await client.callTool({ name: 'list_sandboxes', arguments: {} }), 'list_sandboxes');
  check(!list.sandboxes.some((s) => s.sandbox_id === sandboxId), `still listed: ${JSON.stringify(list)}`);
});

await step('close', async () => {
  await client.close();
});
