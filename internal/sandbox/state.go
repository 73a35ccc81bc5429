package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// labelKey is the runtime Spec.Labels key under which the manager stores
// a sandbox's creation record.
const labelKey = "airlock.sandbox/v1"

// maxStateFileBytes caps a state file read at adoption; a record holds at
// most 2×64 keys of 4 KiB values plus a few fields.
const maxStateFileBytes = 4 << 20

// persisted is what a restarted daemon needs to rebuild a sandbox record.
// It is stored as JSON, in the runtime labels at creation and in the
// state file when it changes later.
type persisted struct {
	Version      int               `json:"v"`
	ID           string            `json:"id,omitempty"`
	Owner        string            `json:"owner,omitempty"`
	Template     string            `json:"template"`
	Pool         bool              `json:"pool,omitempty"` // an unclaimed pool member
	CreatedAt    time.Time         `json:"created_at"`
	ExpiresAt    time.Time         `json:"expires_at"`
	MaxExpiresAt time.Time         `json:"max_expires_at"`
	IdleTimeout  time.Duration     `json:"idle_timeout,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	// Pending: created with Spec.Pending and not confirmed yet.
	Pending bool   `json:"pending,omitempty"`
	Origin  string `json:"origin,omitempty"`
	// Network is the sandbox's network policy, when not none.
	Network *Network `json:"network,omitempty"`
	// Tools are the tools granted to the sandbox; KeyID the key that
	// created it (see Spec).
	Tools []string `json:"tools,omitempty"`
	KeyID string   `json:"key_id,omitempty"`
	// CommandPolicy is the sandbox's command policy, if any.
	CommandPolicy *cmdpolicy.Policy `json:"command_policy,omitempty"`
	// Ending is set, with its reason, before the sandbox is destroyed:
	// a restart finishes the destroy instead of adopting the sandbox
	// (which the interrupted destroy may have left frozen).
	Ending string `json:"ending,omitempty"`
}

// persisted returns what a restart needs of rec. Call with Manager.mu
// held, or before rec is shared.
func (r *record) persisted() persisted {
	p := persistedOf(&r.sb)
	p.Pending, p.Origin = r.pending, r.origin
	p.Tools, p.KeyID = r.sb.Tools, r.keyID
	p.CommandPolicy = r.sb.CmdPolicy
	if r.sb.Network.Mode == NetworkAllowlist {
		n := cloneNetwork(r.sb.Network)
		p.Network = &n
	}
	return p
}

// persistedOf extracts the persistent part of sb.
func persistedOf(sb *Sandbox) persisted {
	return persisted{
		Version:      1,
		ID:           sb.ID,
		Owner:        sb.Owner,
		Template:     sb.Template,
		CreatedAt:    sb.CreatedAt,
		ExpiresAt:    sb.ExpiresAt,
		MaxExpiresAt: sb.MaxExpiresAt,
		IdleTimeout:  sb.IdleTimeout,
		Env:          sb.Env,
		Metadata:     sb.Metadata,
	}
}

// encodeLabels returns the runtime labels that record p.
func encodeLabels(p persisted) (map[string]string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode sandbox record: %w: %v", errdefs.ErrInternal, err)
	}
	return map[string]string{labelKey: string(b)}, nil
}

// decodeRecord parses and checks a persisted record.
func decodeRecord(b []byte) (persisted, error) {
	var p persisted
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("decode sandbox record: %w: %v", errdefs.ErrInvalidArgument, err)
	}
	if p.Version != 1 || p.Template == "" || p.CreatedAt.IsZero() || (!p.Pool && (p.ExpiresAt.IsZero() || p.MaxExpiresAt.IsZero())) {
		return p, fmt.Errorf("decode sandbox record: incomplete: %w", errdefs.ErrInvalidArgument)
	}
	return p, nil
}

// stateStore keeps one JSON file per sandbox in a directory.
type stateStore struct{ dir string }

func (s stateStore) path(id string) string { return filepath.Join(s.dir, id+".json") }

// init creates the directory.
func (s stateStore) init() error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("sandbox state dir: %w: %v", errdefs.ErrInternal, err)
	}
	return nil
}

// save writes p for id atomically (temporary file, then rename). It does
// not fsync: after a power loss the file may be missing or empty, and
// adoption falls back to the creation labels.
func (s stateStore) save(id string, p persisted) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode sandbox state: %w: %v", errdefs.ErrInternal, err)
	}
	f, err := os.CreateTemp(s.dir, ".tmp-"+id+"-")
	if err != nil {
		return fmt.Errorf("save sandbox state: %w: %v", errdefs.ErrInternal, err)
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("save sandbox state: %w: %v", errdefs.ErrInternal, err)
	}
	if err := os.Rename(f.Name(), s.path(id)); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("save sandbox state: %w: %v", errdefs.ErrInternal, err)
	}
	return nil
}

// load reads the state file of id; ok is false when there is none or it
// cannot be used.
func (s stateStore) load(id string) (p persisted, ok bool, err error) {
	f, err := os.Open(s.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return p, false, nil
	}
	if err != nil {
		return p, false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStateFileBytes+1))
	if err != nil {
		return p, false, err
	}
	if len(b) > maxStateFileBytes {
		return p, false, fmt.Errorf("state file of %s is too large", id)
	}
	p, err = decodeRecord(b)
	if err != nil {
		return p, false, err
	}
	if p.ID != id {
		return p, false, fmt.Errorf("state file of %s names %q", id, p.ID)
	}
	return p, true, nil
}

// remove deletes the state file of id, if any.
func (s stateStore) remove(id string) error {
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// ids lists the sandboxes that have a state file, and removes leftover
// temporary files.
func (s stateStore) ids() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") {
			_ = os.Remove(filepath.Join(s.dir, name))
			continue
		}
		if id, ok := strings.CutSuffix(name, ".json"); ok && runtime.IDPattern.MatchString(id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
