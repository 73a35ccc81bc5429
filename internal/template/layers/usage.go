package layers

import "sort"

// Usage is the disk use of the store's layers. Sizes are bytes of regular
// file content; each layer is counted once however many templates (and
// sandboxes: every sandbox of a template mounts the same directories)
// use it.
type Usage struct {
	Layers       int   `json:"layers"`        // layers on disk
	Bytes        int64 `json:"bytes"`         // their total size
	SharedLayers int   `json:"shared_layers"` // layers used by two or more templates
	SharedBytes  int64 `json:"shared_bytes"`
	UnusedLayers int   `json:"unused_layers"` // layers no template uses (Prune frees them)
	UnusedBytes  int64 `json:"unused_bytes"`
	// Templates lists each template's share, sorted by name.
	Templates []TemplateUsage `json:"templates"`
}

// TemplateUsage is one template's part of Usage.
type TemplateUsage struct {
	Name        string `json:"name"`
	Layers      int    `json:"layers"`       // distinct layers
	Bytes       int64  `json:"bytes"`        // their total size
	SharedBytes int64  `json:"shared_bytes"` // part of Bytes in layers other templates use too
}

// Usage reports the store's disk use.
func (s *Store) Usage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs := s.refsLocked()
	var u Usage
	for d, info := range s.layers {
		u.Layers++
		u.Bytes += info.Size
		switch {
		case refs[d] >= 2:
			u.SharedLayers++
			u.SharedBytes += info.Size
		case refs[d] == 0:
			u.UnusedLayers++
			u.UnusedBytes += info.Size
		}
	}
	for name, m := range s.templates {
		tu := TemplateUsage{Name: name}
		seen := make(map[string]bool, len(m.Layers))
		for _, d := range m.Layers {
			if seen[d] {
				continue
			}
			seen[d] = true
			info := s.layers[d]
			tu.Layers++
			tu.Bytes += info.Size
			if refs[d] >= 2 {
				tu.SharedBytes += info.Size
			}
		}
		u.Templates = append(u.Templates, tu)
	}
	sort.Slice(u.Templates, func(i, j int) bool { return u.Templates[i].Name < u.Templates[j].Name })
	return u
}
