package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// classicDockerSave writes the format of `docker save` before the
// containerd image store: manifest.json, a config, and uncompressed
// <id>/layer.tar files.
func classicDockerSave(t *testing.T, path, repoTag string, layerTars ...[]byte) {
	t.Helper()
	var diffIDs []string
	var layerPaths []string
	files := map[string][]byte{}
	for _, b := range layerTars {
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		diffIDs = append(diffIDs, "sha256:"+h)
		p := h + "/layer.tar"
		layerPaths = append(layerPaths, p)
		files[p] = b
	}
	cfg, _ := json.Marshal(map[string]any{
		"architecture": goruntime.GOARCH, "os": "linux",
		"config": map[string]any{"Env": []string{"A=1"}, "WorkingDir": "/w", "Cmd": []string{"sh"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	sum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(sum[:]) + ".json"
	files[cfgName] = cfg
	manifest, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{repoTag}, "Layers": layerPaths}})
	files["manifest.json"] = manifest

	var entries []testutil.Entry
	for _, n := range append([]string{"manifest.json", cfgName}, layerPaths...) {
		entries = append(entries, testutil.Entry{Name: n, Body: string(files[n])})
	}
	if err := os.WriteFile(path, testutil.Tar(t, entries...), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestImportArchive(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	tars := baseLayers(t)

	// Classic docker save (uncompressed layers).
	classic := filepath.Join(dir, "classic.tar")
	classicDockerSave(t, classic, "example/app:1", tars...)
	s := openStore(t)
	res, err := ImportArchive(ctx, s, "classic", classic, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Layers != 3 || res.Manifest.Config.Workdir != "/w" || res.Manifest.Config.Env[0] != "A=1" {
		t.Errorf("result = %+v", res)
	}
	if got, _ := layerFile(t, s, res.Manifest, "etc/os-release"); got != "v2" {
		t.Errorf("etc/os-release = %q", got)
	}
	checkOverlayView(t, s, "classic", wantView)

	// go-containerregistry's writer (compressed layers, two tags): the
	// same layers are reused, and the tag picks the image.
	img := makeImage(t, goruntime.GOARCH, tars...)
	other := makeImage(t, goruntime.GOARCH, testutil.Tar(t, testutil.Entry{Name: "other", Body: "o"}))
	multi := filepath.Join(dir, "multi.tar")
	t1, _ := name.NewTag("example/app:1")
	t2, _ := name.NewTag("example/other:2")
	if err := tarball.MultiWriteToFile(multi, map[name.Tag]v1.Image{t1: img, t2: other}); err != nil {
		t.Fatal(err)
	}
	res2, err := ImportArchive(ctx, s, "tagged", multi, "example/app:1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Reused != 3 {
		t.Errorf("re-import from another archive reused %d layers, want 3", res2.Reused)
	}
	if _, err := ImportArchive(ctx, s, "ambiguous", multi, "", Options{}); err == nil {
		t.Error("an archive with two images and no tag was accepted")
	}
	if _, err := ImportArchive(ctx, s, "missing", multi, "example/none:9", Options{}); err == nil {
		t.Error("a tag not in the archive was accepted")
	}
	for _, bad := range []string{filepath.Join(dir, "nope.tar"), dir} {
		_, err := ImportArchive(ctx, s, "bad", bad, "", Options{})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ImportArchive(%s): %v", filepath.Base(bad), err)
		} else if strings.Contains(err.Error(), dir) {
			t.Errorf("error %q names a host path", err)
		}
	}
}

func TestImportLayout(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img := makeImage(t, goruntime.GOARCH, baseLayers(t)...)
	other := makeImage(t, goruntime.GOARCH, testutil.Tar(t, testutil.Entry{Name: "other", Body: "o"}))
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "v1"})); err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(other, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "example.com/other:v2"})); err != nil {
		t.Fatal(err)
	}
	s := openStore(t)
	res, err := ImportLayout(ctx, s, "fromlayout", dir, "v1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Layers != 3 {
		t.Errorf("result = %+v", res)
	}
	checkOverlayView(t, s, "fromlayout", wantView)
	res2, err := ImportLayout(ctx, s, "other", dir, "v2", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := layerFile(t, s, res2.Manifest, "other"); got != "o" {
		t.Errorf("ref v2 imported the wrong image")
	}
	if _, err := ImportLayout(ctx, s, "none", dir, "v9", Options{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown ref: %v", err)
	}
	if _, err := ImportLayout(ctx, s, "bad", t.TempDir(), "", Options{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("not a layout: %v", err)
	}
}
