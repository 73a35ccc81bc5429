// The step runner of the Node suites that drive real SDKs against a
// daemon (internal/e2b/sdktest, internal/mcp/sdktest): each step prints
// "ok <name>", "skip <name>: <why>" or "FAIL <name>: <error>", and the
// first failure runs the registered cleanups and exits 1. Go tests read
// those lines. No dependencies: each suite imports it by relative path.

const STEP_TIMEOUT_MS = Number(process.env.SDKTEST_STEP_TIMEOUT_MS || 90_000);

const cleanups = [];

// requireEnv returns the named environment variables, exiting 2 (with a
// FAIL setup line) when one is missing.
export function requireEnv(...names) {
  const missing = names.filter((k) => !process.env[k]);
  if (missing.length > 0) {
    console.log(`FAIL setup: missing environment: ${missing.join(', ')}`);
    process.exit(2);
  }
  return Object.fromEntries(names.map((k) => [k, process.env[k]]));
}

// onFailure registers a best-effort cleanup run before a failing exit.
export function onFailure(fn) {
  cleanups.push(fn);
}

export class Skip extends Error {}

export function describe(err) {
  if (err === undefined || err === null) return String(err);
  const name = err.name || err.constructor?.name || 'Error';
  return `${name}: ${err.message ?? String(err)}`;
}

export async function step(name, fn) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`step timed out after ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS);
  });
  try {
    const value = await Promise.race([fn(), timeout]);
    console.log(`ok ${name}`);
    return value;
  } catch (err) {
    if (err instanceof Skip) {
      console.log(`skip ${name}: ${err.message}`);
      return undefined;
    }
    console.log(`FAIL ${name}: ${describe(err)}`);
    for (const c of cleanups.reverse()) {
      await Promise.race([c(), new Promise((r) => setTimeout(r, 10_000))]).catch(() => {});
    }
    process.exit(1);
  } finally {
    clearTimeout(timer);
  }
}

export function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

export function eq(got, want, what) {
  if (got !== want) throw new Error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

// expectReject runs fn, which must throw; it returns the error.
export async function expectReject(fn, what) {
  try {
    await fn();
  } catch (err) {
    return err;
  }
  throw new Error(`${what}: did not fail`);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
