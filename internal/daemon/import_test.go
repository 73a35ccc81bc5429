package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/template/registry"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestImporter: the daemon's importer stores a docker archive as the
// tenant's template, under its store name, with its provenance and
// progress; an unknown format is refused.
func TestImporter(t *testing.T) {
	testutil.RequireRoot(t, "needs root: the layer store unpacks files with their owners")
	store, err := layers.Open(filepath.Join(t.TempDir(), "store"), layers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(64, 2)
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("example.com/rand:1")
	archive := filepath.Join(t.TempDir(), "rand.tar")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	var progress int
	imp := importer{store}
	m, err := imp.Import(context.Background(), registry.ImportRequest{Name: "rand", Owner: "t1", Format: registry.ImportDockerArchive, Path: archive},
		func(ev registry.Event) {
			if ev.Type == "progress" && ev.Step == 1 && ev.Layers == 2 {
				progress++
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != template.StoreName("t1", "rand") || len(m.Layers) != 2 || !strings.HasPrefix(m.Source, "docker-archive (id sha256:") || progress == 0 {
		t.Errorf("manifest %+v, %d progress events", m, progress)
	}
	if _, err := imp.Import(context.Background(), registry.ImportRequest{Name: "x", Format: "zip", Path: archive}, nil); err == nil {
		t.Error("an unknown format was accepted")
	}
}
