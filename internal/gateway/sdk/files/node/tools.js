'use strict';
// Call the tools granted to this sandbox through Airlock's tool gateway.
//
//   const tools = require('tools');
//   const members = await tools.call('get_team_members', { team: 'engineering' });
//   await tools.load();                       // then a function per granted tool
//   const all = await Promise.all(members.map(m => tools.get_expenses({ id: m.id })));
//
// From an ES module: import tools from '/.airlock/lib/node/tools.mjs' (ES
// modules ignore NODE_PATH), or createRequire(import.meta.url)('tools').
//
// Every call goes to the sandbox's gateway endpoint (AIRLOCK_TOOLS_URL,
// default http://127.0.0.1:3129), which decides whether it may run, adds
// any credentials and records it. The sandbox holds no token: the channel
// identifies it. Proxy settings (HTTP_PROXY, NODE_USE_ENV_PROXY) are never
// used for these calls: they go through an agent of this module's own.
//
// A refused or failed call rejects with a ToolError whose code is the
// gateway's (permission_denied, invalid_argument, resource_exhausted, ...).
// Standard library only; Node 18 or newer.

const http = require('http');

const DEFAULT_URL = 'http://127.0.0.1:3129';
// Milliseconds one call may take unless it says otherwise;
// AIRLOCK_TOOLS_TIMEOUT (seconds) overrides it.
const DEFAULT_TIMEOUT_MS = 300 * 1000;
// The largest answer read; a bigger one fails the call.
const MAX_RESPONSE_BYTES = 16 << 20;

// A plain agent: never the global one, which NODE_USE_ENV_PROXY may point
// at a proxy. Many sockets, so that concurrent calls do not wait in turn.
const agent = new http.Agent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 32 });

class ToolError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.name = 'ToolError';
    this.code = code;
    this.detail = message;
  }
}

function defaultTimeoutMs() {
  const s = Number(process.env.AIRLOCK_TOOLS_TIMEOUT);
  return s > 0 ? s * 1000 : DEFAULT_TIMEOUT_MS;
}

function endpoint() {
  const raw = process.env.AIRLOCK_TOOLS_URL || DEFAULT_URL;
  let u;
  try {
    u = new URL(raw);
  } catch (e) {
    throw new ToolError('internal', `AIRLOCK_TOOLS_URL is not a URL: ${JSON.stringify(raw)}`);
  }
  if (u.protocol !== 'http:') {
    throw new ToolError('internal', `AIRLOCK_TOOLS_URL must be an http:// URL, not ${JSON.stringify(raw)}`);
  }
  return { raw, hostname: u.hostname.replace(/^\[|\]$/g, ''), port: u.port || 80, prefix: u.pathname.replace(/\/+$/, '') };
}

// request sends one request and resolves to [status, decoded JSON body].
function request(method, path, body, timeoutMs) {
  return new Promise((resolve, reject) => {
    let ep;
    try {
      ep = endpoint();
    } catch (e) {
      reject(e);
      return;
    }
    const headers = { Accept: 'application/json' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      headers['Content-Length'] = Buffer.byteLength(body);
    }
    let done = false;
    const finish = (err, val) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (err) reject(err); else resolve(val);
    };
    const req = http.request({ agent, method, hostname: ep.hostname, port: ep.port, path: ep.prefix + path, headers }, (res) => {
      const chunks = [];
      let size = 0;
      res.on('data', (c) => {
        size += c.length;
        if (size > MAX_RESPONSE_BYTES) {
          req.destroy();
          finish(new ToolError('resource_exhausted', `the tool gateway's answer is over ${MAX_RESPONSE_BYTES} bytes`));
          return;
        }
        chunks.push(c);
      });
      res.on('error', (e) => finish(new ToolError('unavailable', `reading the tool gateway's answer: ${e.message}`)));
      res.on('end', () => {
        let doc;
        try {
          doc = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch (e) {
          finish(new ToolError('internal', `the tool gateway answered ${res.statusCode} with a body that is not JSON`));
          return;
        }
        finish(null, [res.statusCode, doc]);
      });
    });
    const timer = setTimeout(() => {
      req.destroy();
      finish(new ToolError('timeout', `no answer from the tool gateway within ${timeoutMs / 1000} s`));
    }, timeoutMs);
    req.on('error', (e) => finish(new ToolError('unavailable', `cannot reach the tool gateway at ${ep.raw}: ${e.message}`)));
    req.end(body);
  });
}

function checkError(status, doc) {
  if (status >= 200 && status < 300) return;
  const err = doc && typeof doc === 'object' ? doc.error : undefined;
  if (err && typeof err === 'object' && typeof err.code === 'string') {
    throw new ToolError(err.code, String(err.message ?? ''));
  }
  throw new ToolError('internal', `the tool gateway answered ${status} without an error`);
}

// call calls the tool name with args (an object) and resolves to its
// result. options.timeoutMs bounds the call (default 300 s).
async function call(name, args = {}, options = {}) {
  if (typeof name !== 'string' || name === '') throw new TypeError('the tool name must be a non-empty string');
  if (args === null || typeof args !== 'object' || Array.isArray(args)) throw new TypeError("a tool's arguments are an object");
  const timeoutMs = options.timeoutMs > 0 ? options.timeoutMs : defaultTimeoutMs();
  const [status, doc] = await request('POST', '/v1/call', JSON.stringify({ tool: name, args }), timeoutMs);
  checkError(status, doc);
  if (!doc || typeof doc !== 'object' || !('result' in doc)) throw new ToolError('internal', "the tool gateway's answer has no result");
  return doc.result;
}

let granted = null; // name -> tool, after load or listTools

// listTools resolves to the tools granted to this sandbox, fetched now:
// objects with name, description, input_schema and, where set,
// output_schema.
async function listTools() {
  const [status, doc] = await request('GET', '/v1/tools', undefined, defaultTimeoutMs());
  checkError(status, doc);
  if (!doc || !Array.isArray(doc.tools)) throw new ToolError('internal', "the tool gateway's tool list is malformed");
  const out = doc.tools.filter((t) => t && typeof t.name === 'string');
  granted = new Map(out.map((t) => [t.name, t]));
  return out;
}

// load fetches the granted tools (again), after which tools.NAME is a
// function calling the tool NAME. It resolves to the module.
async function load() {
  await listTools();
  return module.exports;
}

// get returns a function calling the tool name: (args, options) => Promise.
function get(name) {
  const fn = (args = {}, options = {}) => call(name, args, options);
  Object.defineProperty(fn, 'name', { value: name });
  return fn;
}

const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

function tsType(schema) {
  if (!schema || typeof schema !== 'object') return 'unknown';
  if (Array.isArray(schema.enum) && schema.enum.length > 0 &&
      schema.enum.every((v) => v === null || ['string', 'number', 'boolean'].includes(typeof v))) {
    return schema.enum.map((v) => JSON.stringify(v)).join(' | ');
  }
  const t = schema.type;
  if (Array.isArray(t)) {
    const parts = [...new Set(t.map((x) => tsType({ ...schema, type: x })))];
    return parts.includes('unknown') ? 'unknown' : parts.join(' | ');
  }
  switch (t) {
    case 'string': return 'string';
    case 'integer':
    case 'number': return 'number';
    case 'boolean': return 'boolean';
    case 'null': return 'null';
    case 'array': {
      const item = tsType(schema.items);
      return /^[A-Za-z]+$/.test(item) ? `${item}[]` : `Array<${item}>`;
    }
    case 'object': return objectType(schema);
    default: return 'unknown';
  }
}

function objectType(schema) {
  const props = schema && typeof schema.properties === 'object' && schema.properties ? schema.properties : null;
  if (!props) return 'Record<string, unknown>';
  const req = new Set(Array.isArray(schema.required) ? schema.required : []);
  const fields = Object.keys(props).map((p) => {
    const key = IDENT.test(p) ? p : JSON.stringify(p);
    return `${key}${req.has(p) ? '' : '?'}: ${tsType(props[p])}`;
  });
  if (schema.additionalProperties !== false) fields.push('[key: string]: unknown');
  return `{ ${fields.join('; ')} }`;
}

function comment(text) {
  return text ? `  /** ${String(text).replace(/\*\//g, '*\\/').replace(/\n/g, '\n   * ')} */\n` : '';
}

// dts returns TypeScript declarations of the granted tools, generated
// from their schemas (toolList: listTools() output; fetched when
// omitted): an interface GrantedTools with a method per tool, and the
// module typed with it.
async function dts(toolList) {
  const list = toolList || await listTools();
  let out = '// Generated from the schemas of the tools granted to this sandbox (tools.dts()).\n';
  out += "import type { ToolsModule, CallOptions } from './tools';\n\n";
  out += 'export interface GrantedTools {\n';
  for (const t of [...list].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    if (!IDENT.test(t.name)) continue;
    const args = objectType(t.input_schema || {});
    const ret = t.output_schema ? tsType(t.output_schema) : 'unknown';
    const optional = !(t.input_schema && Array.isArray(t.input_schema.required) && t.input_schema.required.length > 0);
    out += comment(t.description);
    out += `  ${t.name}(args${optional ? '?' : ''}: ${args}, options?: CallOptions): Promise<${ret}>;\n`;
  }
  out += '}\n\n';
  out += 'declare const tools: ToolsModule & GrantedTools;\n';
  out += 'export default tools;\n';
  return out;
}

const api = {
  call, listTools, load, get, dts, ToolError,
  DEFAULT_URL, DEFAULT_TIMEOUT_MS, MAX_RESPONSE_BYTES,
};

// tools.NAME is the tool NAME once load() or listTools() has run.
module.exports = new Proxy(api, {
  get(target, prop, receiver) {
    // Never 'then': await on the module must not call a tool.
    if (typeof prop !== 'string' || prop in target || prop === 'then') return Reflect.get(target, prop, receiver);
    if (granted && granted.has(prop)) return get(prop);
    return undefined;
  },
  has(target, prop) {
    return prop in target || (typeof prop === 'string' && granted !== null && granted.has(prop));
  },
});
