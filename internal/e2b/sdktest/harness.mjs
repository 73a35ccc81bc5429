// The E2B suites' harness: the shared step runner, and a check that the
// SDK will talk to the server under test and not to E2B's cloud.
import { requireEnv as need } from '../../testutil/js/steps.mjs';

export { onFailure, Skip, describe, step, check, eq, expectReject, sleep } from '../../testutil/js/steps.mjs';

export function requireEnv() {
  need('E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY');
  if (process.env.E2B_DEBUG === 'true') {
    console.log('FAIL setup: E2B_DEBUG=true makes the SDK skip the API');
    process.exit(2);
  }
}
