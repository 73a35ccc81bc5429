package api

import "github.com/airlock-sandbox/airlock/internal/secrets"

// handler holds a Reader: the guard must report this file.
type handler struct{ r *secrets.Reader }
