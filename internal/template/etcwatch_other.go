//go:build !linux

package template

import (
	"fmt"
	"log/slog"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

type etcWatch struct{}

func watchEtc(string, func(), *slog.Logger) (*etcWatch, error) {
	return nil, fmt.Errorf("watching /etc: %w on this operating system", errdefs.ErrNotSupported)
}

func (*etcWatch) close() error { return nil }
