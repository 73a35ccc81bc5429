// The ES module form of tools.js: import tools from '/.airlock/lib/node/tools.mjs'.
// tools is the same object as require('tools'): after await tools.load(),
// tools.NAME calls the tool NAME.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const tools = require('./tools.js');

export default tools;
export const { call, listTools, load, get, dts, ToolError, DEFAULT_URL, DEFAULT_TIMEOUT_MS, MAX_RESPONSE_BYTES } = tools;
