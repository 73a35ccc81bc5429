package secrets

import (
	"fmt"
	"log/slog"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Redacted is what a Value shows wherever it is printed, logged or
// encoded.
const Redacted = "[redacted]"

// Value is a secret's plaintext. It never shows its bytes: fmt (every
// verb, %#v included), log/slog, encoding/json and encoding (text) all
// get Redacted, and so does reflection-based printing of a struct that
// holds a Value in an unexported field, since the bytes sit behind a
// function value. Only Bytes hands them out, to the daemon code that puts them
// on the wire (an upstream request's header or body).
//
// Copies of a Value share its bytes: Wipe on any copy zeroes them for
// all. The zero Value is empty.
type Value struct {
	// p reaches the bytes through a function value, which fmt prints as
	// an address whatever the verb; a pointer would be followed (fmt
	// prints the pointee of a pointer it cannot format with a verb).
	p func() []byte
}

// NewValue returns a Value that owns b: the caller must not use b
// afterwards, except through the Value (Wipe zeroes it).
func NewValue(b []byte) Value { return Value{p: func() []byte { return b }} }

// Bytes returns the plaintext itself, not a copy: the caller must not
// modify it, keep it past its use or put it anywhere it could be seen (a
// log line, an error, a response), and it reads as zeros after Wipe.
func (v Value) Bytes() []byte {
	if v.p == nil {
		return nil
	}
	return v.p()
}

// Len is the plaintext's length in bytes.
func (v Value) Len() int { return len(v.Bytes()) }

// Wipe overwrites the plaintext with zeros, for every copy of v. Call it
// once the value has been used.
func (v Value) Wipe() { clear(v.Bytes()) }

// String implements fmt.Stringer.
func (Value) String() string { return Redacted }

// GoString implements fmt.GoStringer (%#v).
func (Value) GoString() string { return Redacted }

// Format implements fmt.Formatter, for every verb.
func (Value) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(Redacted)) }

// LogValue implements slog.LogValuer.
func (Value) LogValue() slog.Value { return slog.StringValue(Redacted) }

// MarshalJSON implements json.Marshaler.
func (Value) MarshalJSON() ([]byte, error) { return []byte(`"` + Redacted + `"`), nil }

// MarshalText implements encoding.TextMarshaler, which other encoders
// use.
func (Value) MarshalText() ([]byte, error) { return []byte(Redacted), nil }

// GobEncode refuses: a Value is never serialized.
func (Value) GobEncode() ([]byte, error) {
	return nil, fmt.Errorf("a secret value cannot be encoded: %w", errdefs.ErrInvalidArgument)
}
