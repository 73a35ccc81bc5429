// Runs the real @e2b/code-interpreter SDK against a server that speaks E2B's
// API (for Airlock: its E2B edge). Environment: E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY (required); E2B_TEMPLATE (optional, else the SDK's default
// "code-interpreter-v1"). Each step prints "ok <step>", "skip <step>: <why>"
// or "FAIL <step>: <error>"; the first failure kills the sandbox and exits 1.
import { randomBytes } from 'node:crypto';
import { Sandbox } from '@e2b/code-interpreter';
import { requireEnv, onFailure, step, check, eq, Skip } from './harness.mjs';

requireEnv();

const run = randomBytes(6).toString('hex');
const template = process.env.E2B_TEMPLATE || undefined;
const createOpts = { metadata: { suite: 'airlock-sdktest-ci', run }, timeoutMs: 180_000 };

let sbx;
onFailure(async () => {
  if (sbx) await sbx.kill().catch(() => {});
});

// hasModule asks the default Python context whether a module can be imported.
async function hasModule(name) {
  const e = await sbx.runCode(`import importlib.util\nimportlib.util.find_spec(${JSON.stringify(name)}) is not None`);
  if (e.error) throw new Error(`probing ${name}: ${e.error.name}: ${e.error.value}`);
  return e.text === 'True';
}

await step('create', async () => {
  sbx = template ? await Sandbox.create(template, createOpts) : await Sandbox.create(createOpts);
  check(sbx.sandboxId, 'no sandboxId');
});

await step('state-across-calls', async () => {
  const first = await sbx.runCode('x = 1');
  check(!first.error, `x = 1: ${first.error?.name}: ${first.error?.value}`);
  const second = await sbx.runCode('x + 1');
  check(!second.error, `x + 1: ${second.error?.name}: ${second.error?.value}`);
  eq(second.text, '2', 'text of x + 1');
  const main = second.results.filter((r) => r.isMainResult);
  eq(main.length, 1, 'main results');
});

await step('print-stdout', async () => {
  const lines = [];
  const e = await sbx.runCode('print("hello from python")\nimport sys\nprint("to stderr", file=sys.stderr)', {
    onStdout: (m) => lines.push(m.line),
  });
  eq(e.logs.stdout.join(''), 'hello from python\n', 'logs.stdout');
  eq(e.logs.stderr.join(''), 'to stderr\n', 'logs.stderr');
  eq(lines.join(''), 'hello from python\n', 'onStdout lines');
  eq(e.results.length, 0, 'results of a print');
});

await step('error-result', async () => {
  const e = await sbx.runCode('1/0');
  check(e.error, 'no error for 1/0');
  eq(e.error.name, 'ZeroDivisionError', 'error name');
  check(/division by zero/.test(e.error.value), `error value ${JSON.stringify(e.error.value)}`);
  check(typeof e.error.traceback === 'string' && e.error.traceback.includes('ZeroDivisionError'), 'traceback');
  const after = await sbx.runCode('x');
  eq(after.text, '1', 'state kept after an error');
});

await step('chart', async () => {
  if (!(await hasModule('matplotlib'))) throw new Skip('matplotlib is not installed in the sandbox');
  const e = await sbx.runCode([
    'import matplotlib',
    'matplotlib.use("Agg")',
    'import matplotlib.pyplot as plt',
    'plt.plot([1, 2, 3], [1, 4, 9])',
    'plt.title("squares")',
    'plt.show()',
  ].join('\n'));
  check(!e.error, `chart: ${e.error?.name}: ${e.error?.value}`);
  const img = e.results.find((r) => r.png);
  check(img, `no png result: formats ${JSON.stringify(e.results.map((r) => r.formats()))}`);
  const png = Buffer.from(img.png, 'base64');
  eq(png.subarray(1, 4).toString('latin1'), 'PNG', 'png magic');
  console.log(`  (chart result formats: ${JSON.stringify(img.formats())}${img.chart ? `, chart type ${img.chart.type}` : ', no e2b chart data'})`);
});

await step('dataframe', async () => {
  if (!(await hasModule('pandas'))) throw new Skip('pandas is not installed in the sandbox');
  const e = await sbx.runCode('import pandas as pd\npd.DataFrame({"name": ["a", "b"], "value": [1, 2]})');
  check(!e.error, `dataframe: ${e.error?.name}: ${e.error?.value}`);
  const main = e.results.find((r) => r.isMainResult);
  check(main, 'no main result');
  check(main.html && main.html.includes('<table'), `no HTML table: formats ${JSON.stringify(main.formats())}`);
  check(main.text && main.text.includes('name') && main.text.includes('value'), `text ${JSON.stringify(main.text)}`);
});

await step('javascript-context', async () => {
  const ctx = await sbx.createCodeContext({ language: 'js' });
  check(ctx.id, `context without id: ${JSON.stringify(ctx)}`);
  const first = await sbx.runCode('var y = 20', { context: ctx });
  check(!first.error, `var y = 20: ${first.error?.name}: ${first.error?.value}`);
  const second = await sbx.runCode('y + 1', { context: ctx });
  check(!second.error, `y + 1: ${second.error?.name}: ${second.error?.value}`);
  eq(second.text, '21', 'text of y + 1');
  const py = await sbx.runCode('x');
  eq(py.text, '1', 'python context untouched');
});

await step('contexts', async () => {
  const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' });
  const listed = await sbx.listCodeContexts();
  check(listed.some((c) => c.id === ctx.id), `listCodeContexts lacks ${ctx.id}: ${JSON.stringify(listed)}`);
  await sbx.runCode('z = 5', { context: ctx });
  await sbx.restartCodeContext(ctx);
  const after = await sbx.runCode('z', { context: ctx });
  eq(after.error?.name, 'NameError', 'a variable after the restart');
  await sbx.removeCodeContext(ctx);
  const left = await sbx.listCodeContexts();
  check(!left.some((c) => c.id === ctx.id), `removed context still listed`);
});

await step('kill', async () => {
  eq(await sbx.kill(), true, 'kill()');
  sbx = undefined;
});

console.log('PASS codeinterp');
