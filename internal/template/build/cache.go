package build

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// cacheFile is the step cache's file in the store root.
const cacheFile = "build-cache.json"

// Caps of the step cache.
const (
	// maxCacheEntries: beyond it the least recently used entries go.
	maxCacheEntries = 10_000
	// maxCacheBytes caps the file read at start-up.
	maxCacheBytes = 16 << 20
	// cacheVersion changes when the file's meaning does.
	cacheVersion = 1
)

// cacheEntry is the result of one step: the layer it made, or none
// (Layer empty) for a step that changed nothing on disk.
type cacheEntry struct {
	Layer string    `json:"layer,omitempty"`
	Used  time.Time `json:"used"`
}

// cacheData is the file's content.
type cacheData struct {
	Version int                   `json:"version"`
	Entries map[string]cacheEntry `json:"entries"`
}

// cache maps step cache keys to their results, kept in a JSON file that
// flush replaces atomically, once per build: the layers of a build a
// crash interrupts are pruned at start-up anyway, so saving after every
// step would buy nothing. Entries do not keep their layers alive: a
// reader checks (and pins) the layer before using it.
type cache struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex
	entries map[string]cacheEntry
	dirty   bool // entries or use times changed since the last save
}

// openCache loads the cache at path. A missing file is an empty cache; a
// damaged one is logged and replaced by an empty cache.
func openCache(path string, log *slog.Logger) (*cache, error) {
	c := &cache{path: path, log: log, entries: make(map[string]cacheEntry)}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("build cache: %w", errdefs.ErrInternal)
	}
	defer f.Close()
	var d cacheData
	dec := json.NewDecoder(io.LimitReader(f, maxCacheBytes))
	if err := dec.Decode(&d); err != nil || d.Version != cacheVersion {
		log.Warn("build cache: unreadable; starting empty", "err", err, "version", d.Version)
		return c, nil
	}
	for k, e := range d.Entries {
		if !validKey(k) {
			continue
		}
		if e.Layer != "" {
			if _, err := layers.ParseDiffID(e.Layer); err != nil {
				continue
			}
		}
		c.entries[k] = e
	}
	return c, nil
}

// validKey reports whether k looks like an airfile cache key (hex
// SHA-256).
func validKey(k string) bool {
	if len(k) != 64 {
		return false
	}
	for _, r := range k {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// get returns the entry of key and marks it used (in memory; the time
// is saved by the next flush).
func (c *cache) get(key string) (cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if ok {
		e.Used = time.Now().UTC()
		c.entries[key] = e
		c.dirty = true
	}
	return e, ok
}

// flush saves the entries and use times changed since the last save.
func (c *cache) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dirty {
		return nil
	}
	return c.saveLocked()
}

// put records the result of key (in memory; flush saves it).
func (c *cache) put(key, layer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[key] = cacheEntry{Layer: layer, Used: time.Now().UTC()}
	c.evictLocked()
	c.dirty = true
}

// evictLocked drops the least recently used entries above the cap.
func (c *cache) evictLocked() {
	if len(c.entries) <= maxCacheEntries {
		return
	}
	keys := make([]string, 0, len(c.entries))
	for k := range c.entries {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return c.entries[keys[i]].Used.Before(c.entries[keys[j]].Used) })
	for _, k := range keys[:len(keys)-maxCacheEntries] {
		delete(c.entries, k)
	}
}

// saveLocked replaces the file with the current entries: written to a
// temporary file, synced, renamed over the old one, directory synced.
func (c *cache) saveLocked() error {
	data, err := json.Marshal(cacheData{Version: cacheVersion, Entries: c.entries})
	if err != nil {
		return fmt.Errorf("build cache: %w", errdefs.ErrInternal)
	}
	// The temporary file goes to the store's tmp/, which the store
	// empties when it opens: a crash leaves no debris.
	dir := filepath.Dir(c.path)
	f, err := os.CreateTemp(filepath.Join(dir, "tmp"), cacheFile+".tmp-*")
	if err != nil {
		return fmt.Errorf("build cache: %w", errdefs.ErrInternal)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, c.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("build cache: save: %w", errdefs.ErrInternal)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	c.dirty = false
	return nil
}
