// Package testutil holds what the tests of several packages share: the
// check that a test runs as root (RequireRoot, which fails instead of
// skipping when the run demands root) and a builder of small tar streams
// for layer and build-context tests (Tar). Only tests import it.
package testutil
