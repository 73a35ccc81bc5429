package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// MaxSchemaBytes caps each of a tool's JSON Schemas.
const MaxSchemaBytes = 64 << 10

// schemaURL is where a schema being compiled lives, for the compiler's
// reference resolution: a relative $ref resolves against it (or against
// the schema's own $id) to a URL that is not the document, which
// refuseLoader refuses.
const (
	schemaBase = "mem:///"
	schemaURL  = schemaBase + "schema.json"
)

// errRemoteRef is what refuseLoader answers for every URL.
var errRemoteRef = errors.New("only references within the schema itself are allowed")

// refuseLoader is the compiler's URL loader: it loads nothing, so that a
// tool's schema never makes the daemon read a file or fetch a URL (a
// $ref or $schema outside the document fails the compile). The
// meta-schemas of the drafts are built into the library and need no
// loader.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) { return nil, errRemoteRef }

// DecodeJSON decodes one JSON value the way the schema library expects
// (numbers as json.Number), refusing anything after it. The call
// pipeline decodes arguments and outputs with it before validating them
// against a compiled schema.
func DecodeJSON(raw []byte) (any, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", errdefs.ErrInvalidArgument)
	}
	return v, nil
}

// CompileSchema compiles raw, a JSON Schema of at most MaxSchemaBytes,
// as draft 2020-12 unless its $schema names another draft. It never
// loads anything: a $ref that leaves the document, or a $schema that is
// not a known draft, is an error. Errors wrap errdefs.ErrInvalidArgument
// and say what is wrong in the schema's own terms (no host paths).
func CompileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	if len(raw) > MaxSchemaBytes {
		return nil, fmt.Errorf("schema is %d bytes, more than %d: %w", len(raw), MaxSchemaBytes, errdefs.ErrInvalidArgument)
	}
	doc, err := DecodeJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("schema is %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("schema: %s: %w", schemaErrText(err), errdefs.ErrInvalidArgument)
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("schema: %s: %w", schemaErrText(err), errdefs.ErrInvalidArgument)
	}
	return s, nil
}

// schemaErrText is the library's description of err, without the
// placeholder URL the schema was compiled under (nor the base of the
// URLs relative references resolved to), and clipped.
func schemaErrText(err error) string {
	s := err.Error()
	s = strings.ReplaceAll(s, schemaURL, "")
	s = strings.ReplaceAll(s, schemaBase, "")
	s = strings.Join(strings.Fields(s), " ")
	const max = 512
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "..."
	}
	return s
}
