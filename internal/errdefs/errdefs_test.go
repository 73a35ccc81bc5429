package errdefs

import (
	"context"
	"fmt"
	"testing"
)

func TestClass(t *testing.T) {
	tests := []struct {
		err  error
		want error
	}{
		{nil, nil},
		{fmt.Errorf("sandbox x: %w", ErrNotFound), ErrNotFound},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", ErrTimeout)), ErrTimeout},
		{fmt.Errorf("api key: %w", ErrUnauthenticated), ErrUnauthenticated},
		{context.DeadlineExceeded, ErrInternal},
		{fmt.Errorf("plain"), ErrInternal},
	}
	for _, tt := range tests {
		if got := Class(tt.err); got != tt.want {
			t.Errorf("Class(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestPublic(t *testing.T) {
	err := fmt.Errorf("pull x: %w", Publicf(ErrUnavailable, "registry unreachable: %s refused the connection", "r.example"))
	if Class(err) != ErrUnavailable {
		t.Errorf("Class = %v", Class(err))
	}
	if msg, ok := PublicMessage(err); !ok || msg != "registry unreachable: r.example refused the connection" {
		t.Errorf("PublicMessage = %q, %v", msg, ok)
	}
	if _, ok := PublicMessage(fmt.Errorf("x: %w", ErrUnavailable)); ok {
		t.Error("a plain error has a public message")
	}
}
