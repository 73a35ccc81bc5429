package tracing

import (
	"crypto/sha256"
	"encoding/hex"

	"go.opentelemetry.io/otel/attribute"
)

// The attribute keys of the daemon's own spans (the HTTP ones follow
// OpenTelemetry's semantic conventions). IDs, names, sizes, statuses and
// digests only: see the package doc.
const (
	KeySandbox       = attribute.Key("airlock.sandbox.id")
	KeyTenant        = attribute.Key("airlock.tenant")
	KeyTemplate      = attribute.Key("airlock.template")
	KeyOrigin        = attribute.Key("airlock.create.origin") // pool or cold
	KeyPoolResult    = attribute.Key("airlock.pool.result")   // claimed, empty, failed
	KeyExecMode      = attribute.Key("airlock.exec.mode")     // buffered or stream
	KeyExecStatus    = attribute.Key("airlock.exec.status")
	KeyExitCode      = attribute.Key("airlock.exec.exit_code")
	KeyCommandSHA256 = attribute.Key("airlock.exec.command.sha256")
	KeyCommandBytes  = attribute.Key("airlock.exec.command.bytes")
	KeyFileBytes     = attribute.Key("airlock.file.bytes")
	KeyFileOp        = attribute.Key("airlock.file.op") // upload or download
	KeyCodeLanguage  = attribute.Key("airlock.code.language")
	KeyCodeStatus    = attribute.Key("airlock.code.status")
	KeyCodeBytes     = attribute.Key("airlock.code.bytes")
	KeyBuildKind     = attribute.Key("airlock.template.build.kind") // build or import
	KeyToolName      = attribute.Key("airlock.tool.name")
	KeyToolOutcome   = attribute.Key("airlock.tool.outcome")
	KeyToolStage     = attribute.Key("airlock.tool.stage")
	KeyToolDryRun    = attribute.Key("airlock.tool.dry_run")
	KeyLayers        = attribute.Key("airlock.rootfs.layers")

	KeyHTTPMethod = attribute.Key("http.request.method")
	KeyHTTPRoute  = attribute.Key("http.route")
	KeyHTTPStatus = attribute.Key("http.response.status_code")
)

// Command returns the attributes of a command: its text's SHA-256 and
// size, never the text (it may carry a secret).
func Command(text string) []attribute.KeyValue {
	sum := sha256.Sum256([]byte(text))
	return []attribute.KeyValue{
		KeyCommandSHA256.String(hex.EncodeToString(sum[:])),
		KeyCommandBytes.Int(len(text)),
	}
}
