package agentwire

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// TestRoundTrip: every class survives the agent socket, with its message,
// and no two classes share a code.
func TestRoundTrip(t *testing.T) {
	seen := map[connect.Code]error{}
	for _, class := range errdefs.Classes() {
		err := fmt.Errorf("stat /home/user/x: %w", class)
		wire := ToConnect(err)
		var ce *connect.Error
		if !errors.As(wire, &ce) {
			t.Fatalf("ToConnect(%v) = %v, not a Connect error", err, wire)
		}
		if other, dup := seen[ce.Code()]; dup {
			t.Errorf("%v and %v share the code %v", class, other, ce.Code())
		}
		seen[ce.Code()] = class
		back := FromConnect(wire)
		if errdefs.Class(back) != class {
			t.Errorf("%v -> %v -> %v", class, ce.Code(), errdefs.Class(back))
		}
		if !strings.Contains(back.Error(), "stat /home/user/x") {
			t.Errorf("message lost: %q", back)
		}
	}
	if len(codes) != len(errdefs.Classes()) {
		t.Errorf("codes maps %d classes, errdefs has %d", len(codes), len(errdefs.Classes()))
	}
}

func TestFromConnectOthers(t *testing.T) {
	for code, class := range map[connect.Code]error{
		connect.CodeOutOfRange: errdefs.ErrInvalidArgument,
		connect.CodeAborted:    errdefs.ErrFailedPrecondition,
		connect.CodeUnknown:    errdefs.ErrInternal,
		connect.CodeDataLoss:   errdefs.ErrInternal,
	} {
		if got := errdefs.Class(FromConnect(connect.NewError(code, errors.New("x")))); got != class {
			t.Errorf("FromConnect(%v) = %v, want %v", code, got, class)
		}
	}
	if got := FromConnect(errors.New("dial unix: connection refused")); !errors.Is(got, errdefs.ErrUnavailable) {
		t.Errorf("a transport error = %v, want unavailable", got)
	}
	if FromConnect(nil) != nil || ToConnect(nil) != nil {
		t.Error("nil is not nil")
	}
	ce := connect.NewError(connect.CodeAborted, errors.New("x"))
	if ToConnect(ce) != error(ce) {
		t.Error("a Connect error was wrapped again")
	}
}
