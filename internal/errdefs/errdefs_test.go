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
