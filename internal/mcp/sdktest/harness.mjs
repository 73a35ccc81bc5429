// The MCP suites' harness: the shared step runner, and checks of tool
// results.
import { check, describe } from '../../testutil/js/steps.mjs';

export { requireEnv, onFailure, Skip, describe, step, check, eq, expectReject, sleep } from '../../testutil/js/steps.mjs';

// text joins a tool result's text content.
export function text(res) {
  return (res?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

// ok checks that a tool call succeeded and returns its structured content.
export function ok(res, what) {
  check(res && !res.isError, `${what}: tool error: ${text(res)}`);
  check(res.structuredContent && typeof res.structuredContent === 'object', `${what}: no structured content: ${JSON.stringify(res)}`);
  return res.structuredContent;
}

// refused runs a call that must be refused, as a thrown error (an
// McpError: a JSON-RPC error) or an isError result, and returns the
// message it carried.
export async function refused(fn, what) {
  let res;
  try {
    res = await fn();
  } catch (err) {
    return `${describe(err)} (code ${err.code})`;
  }
  check(res?.isError === true, `${what}: was not refused: ${JSON.stringify(res)}`);
  return text(res);
}
