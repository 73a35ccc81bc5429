package oci

import (
	"archive/tar"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestPullMultiLayer(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	reg, push := newRegistry(t, nil)
	img := makeImage(t, goruntime.GOARCH, baseLayers(t)...)
	pushImage(t, push, "test/multi:v1", img)
	s := openStore(t)

	var events []Progress
	res, err := Pull(ctx, s, "multi", reg.host+"/test/multi:v1", Options{Insecure: true, Progress: func(p Progress) { events = append(events, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Layers != 3 || res.Reused != 0 || res.Bytes == 0 {
		t.Errorf("result = %+v", res)
	}
	digest, _ := img.Digest()
	if res.Digest != digest.String() || !strings.HasSuffix(res.Manifest.Source, "@"+digest.String()) {
		t.Errorf("digest %s, source %s; want %s", res.Digest, res.Manifest.Source, digest)
	}
	cfg := res.Manifest.Config
	want := layers.Config{Env: testConfig.Env, Workdir: "/app", User: "1000:1000", Cmd: []string{"python3"}, Entrypoint: []string{"/bin/sh", "-c"}}
	if !slices.Equal(cfg.Env, want.Env) || cfg.Workdir != want.Workdir || cfg.User != want.User || !slices.Equal(cfg.Cmd, want.Cmd) || !slices.Equal(cfg.Entrypoint, want.Entrypoint) {
		t.Errorf("config = %+v, want %+v", cfg, want)
	}
	if got, err := s.Get("multi"); err != nil || len(got.Layers) != 3 {
		t.Fatalf("stored manifest: %+v, %v", got, err)
	}

	// Progress: every layer reported, ending with a final report whose
	// Done equals Total.
	finals := 0
	for _, p := range events {
		if p.Layers != 3 || p.Layer < 1 || p.Layer > 3 {
			t.Errorf("bad progress %+v", p)
		}
		if p.Final {
			finals++
			if p.Done != p.Total || p.Total == 0 {
				t.Errorf("final progress %+v: Done != Total", p)
			}
		}
	}
	if finals != 3 {
		t.Errorf("%d final progress reports, want 3", finals)
	}

	// On-disk overlay format of layer 2: a whiteout device and an
	// opaque directory.
	l2, _ := s.LayerDir(res.Manifest.Layers[1])
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(l2, "data/remove-me"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("data/remove-me in layer 2 is not a 0:0 whiteout: %v mode %o", err, st.Mode)
	}
	buf := make([]byte, 8)
	if n, err := unix.Lgetxattr(filepath.Join(l2, "opq"), layers.OpaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("opq in layer 2 is not opaque: %v", err)
	}
	// The real test of the format: mount the layers with overlayfs as
	// the runtime does and look at the merged view.
	checkOverlayView(t, s, "multi", wantView)
}

func TestSecondPullDoesNoWork(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	reg, push := newRegistry(t, nil)
	img := makeImage(t, goruntime.GOARCH, baseLayers(t)...)
	pushImage(t, push, "test/multi:v1", img)
	s := openStore(t)
	if _, err := Pull(ctx, s, "first", reg.host+"/test/multi:v1", Options{Insecure: true}); err != nil {
		t.Fatal(err)
	}
	if n := reg.blobGets(t, img); n != 3 {
		t.Fatalf("first pull fetched %d layer blobs, want 3", n)
	}
	first, _ := s.Get("first")
	dir, _ := s.LayerDir(first.Layers[0])
	before, err := os.Stat(filepath.Join(dir, "etc/os-release"))
	if err != nil {
		t.Fatal(err)
	}

	var events []Progress
	res, err := Pull(ctx, s, "second", reg.host+"/test/multi:v1", Options{Insecure: true, Progress: func(p Progress) { events = append(events, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused != 3 || res.Bytes != 0 {
		t.Errorf("second pull: %+v, want all 3 layers reused and no bytes read", res)
	}
	if n := reg.blobGets(t, img); n != 3 {
		t.Errorf("second pull fetched layer blobs again (%d GETs in total)", n)
	}
	for _, p := range events {
		if !p.Skipped {
			t.Errorf("progress %+v: want every layer skipped", p)
		}
	}
	after, err := os.Stat(filepath.Join(dir, "etc/os-release"))
	if err != nil || !os.SameFile(before, after) {
		t.Error("layer files were rewritten")
	}
	if u := s.Usage(); u.Layers != 3 || u.SharedLayers != 3 || len(u.Templates) != 2 {
		t.Errorf("usage = %+v, want 3 layers shared by 2 templates", u)
	}
	// Same name again needs Replace.
	if _, err := Pull(ctx, s, "second", reg.host+"/test/multi:v1", Options{Insecure: true}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("pull into an existing name: %v, want ErrAlreadyExists", err)
	}
	if _, err := Pull(ctx, s, "second", reg.host+"/test/multi:v1", Options{Insecure: true, Replace: true}); err != nil {
		t.Errorf("pull with Replace: %v", err)
	}
}

func TestPullManifestList(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	reg, push := newRegistry(t, nil)
	native := goruntime.GOARCH
	other := "arm64"
	if native == "arm64" {
		other = "amd64"
	}
	mk := func(arch string) v1.Image {
		return makeImage(t, arch, testutil.Tar(t, testutil.Entry{Name: "etc/", Type: tar.TypeDir}, testutil.Entry{Name: "etc/arch", Body: arch}))
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: mk(other), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}},
		mutate.IndexAddendum{Add: mk(native), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: native}}},
	)
	pushIndex(t, push, "test/multiarch:v1", idx)
	ref := reg.host + "/test/multiarch:v1"
	s := openStore(t)

	tests := []struct {
		name, platform, wantArch string
		wantErr                  error
	}{
		{"default is native", "", native, nil},
		{"explicit other", "linux/" + other, other, nil},
		{"missing platform", "linux/s390x", "", errdefs.ErrNotFound},
		{"not linux", "windows/amd64", "", errdefs.ErrInvalidArgument},
		{"malformed", "linux", "", errdefs.ErrInvalidArgument},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "arch" + string(rune('a'+i))
			res, err := Pull(ctx, s, name, ref, Options{Insecure: true, Platform: tt.platform})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got, _ := layerFile(t, s, res.Manifest, "etc/arch"); got != tt.wantArch {
				t.Errorf("pulled the %q image, want %q", got, tt.wantArch)
			}
		})
	}
	// A single-platform image for another architecture is refused too.
	pushImage(t, push, "test/foreign:v1", mk(other))
	if _, err := Pull(ctx, s, "foreign", reg.host+"/test/foreign:v1", Options{Insecure: true}); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), other) {
		t.Errorf("pull of a %s-only image: %v", other, err)
	}
}

// authWrap demands basic auth alice:s3cret or the bearer token tok-123.
func authWrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if (ok && u == "alice" && p == "s3cret") || r.Header.Get("Authorization") == "Bearer tok-123" {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
	})
}

func TestPullAuthenticated(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	reg, push := newRegistry(t, authWrap)
	img := makeImage(t, goruntime.GOARCH, testutil.Tar(t, testutil.Entry{Name: "secret", Body: "private image"}))
	pushImage(t, push, "private/img:v1", img)
	ref := reg.host + "/private/img:v1"
	s := openStore(t)

	tests := []struct {
		name    string
		opts    Options
		wantErr error
	}{
		{"anonymous", Options{}, errdefs.ErrUnauthenticated},
		{"wrong password", Options{Username: "alice", Password: "nope"}, errdefs.ErrUnauthenticated},
		{"username only", Options{Username: "alice"}, errdefs.ErrInvalidArgument},
		{"token and password", Options{Username: "alice", Password: "s3cret", Token: "tok-123"}, errdefs.ErrInvalidArgument},
		{"password", Options{Username: "alice", Password: "s3cret"}, nil},
		{"token", Options{Token: "tok-123"}, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Insecure = true
			name := "auth" + string(rune('a'+i))
			res, err := Pull(ctx, s, name, ref, tt.opts)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "tok-123") {
					t.Errorf("error %q leaks a credential", err)
				}
				if tt.wantErr == errdefs.ErrUnauthenticated && !strings.Contains(err.Error(), "authentication") {
					t.Errorf("error %q does not say authentication is needed", err)
				}
				if _, gerr := s.Get(name); gerr == nil {
					t.Error("a failed pull stored a template")
				}
				return
			}
			if got, _ := layerFile(t, s, res.Manifest, "secret"); got != "private image" {
				t.Errorf("secret = %q", got)
			}
		})
	}
}

func TestPlainHTTPRefused(t *testing.T) {
	requireRoot(t)
	reg, push := newRegistry(t, nil)
	pushImage(t, push, "test/img:v1", makeImage(t, goruntime.GOARCH, testutil.Tar(t, testutil.Entry{Name: "f", Body: "x"})))
	s := openStore(t)
	_, err := Pull(context.Background(), s, "img", reg.host+"/test/img:v1", Options{})
	if !errors.Is(err, errdefs.ErrPermissionDenied) && !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("err = %v, want a refusal", err)
	}
	if !strings.Contains(err.Error(), "insecure") {
		t.Errorf("error %q does not say why", err)
	}
	if len(s.List()) != 0 || s.Usage().Layers != 0 {
		t.Error("a refused pull stored something")
	}
}

func TestPullBadReferences(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	for _, tt := range []struct{ name, ref string }{
		{"ok", ""},
		{"ok", "UPPER/Case:tag"},
		{"Bad Name", "alpine"},
	} {
		if _, err := Pull(ctx, s, tt.name, tt.ref, Options{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Pull(%q, %q): %v, want ErrInvalidArgument", tt.name, tt.ref, err)
		}
	}
}

func TestPullNotFound(t *testing.T) {
	requireRoot(t)
	reg, _ := newRegistry(t, nil)
	s := openStore(t)
	if _, err := Pull(context.Background(), s, "x", reg.host+"/no/such:image", Options{Insecure: true}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("err = %v, want ErrNotFound", err)
	}
}

func TestPullTamperedImage(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	reg, push := newRegistry(t, nil)
	s := openStore(t)

	// The config claims another diff ID than the layer has: the
	// uncompressed digest check catches it.
	img := makeImage(t, goruntime.GOARCH, testutil.Tar(t, testutil.Entry{Name: "f", Body: "real"}))
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs[0] = v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}
	bad, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	pushImage(t, push, "test/tampered:v1", bad)
	_, err = Pull(ctx, s, "tampered", reg.host+"/test/tampered:v1", Options{Insecure: true})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "digest") {
		t.Errorf("tampered diff ID: %v", err)
	}

	// A hostile layer is refused with the extraction error.
	evil := makeImage(t, goruntime.GOARCH, testutil.Tar(t, testutil.Entry{Name: "../../escape", Body: "x"}))
	pushImage(t, push, "test/evil:v1", evil)
	_, err = Pull(ctx, s, "evil", reg.host+"/test/evil:v1", Options{Insecure: true})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `".." is not allowed`) {
		t.Errorf("hostile layer: %v", err)
	}
	// Set-id files: refused by default, stripped on request.
	suid := makeImage(t, goruntime.GOARCH, testutil.Tar(t, testutil.Entry{Name: "su", Body: "x", Mode: 0o4755}))
	pushImage(t, push, "test/suid:v1", suid)
	if _, err := Pull(ctx, s, "suid", reg.host+"/test/suid:v1", Options{Insecure: true}); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("setuid layer: %v", err)
	}
	res, err := Pull(ctx, s, "suid", reg.host+"/test/suid:v1", Options{Insecure: true, StripSetuid: true})
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := s.LayerDir(res.Manifest.Layers[0])
	if fi, err := os.Stat(filepath.Join(dir, "su")); err != nil || fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("su kept its setuid bit: %v", fi.Mode())
	}
	if got := s.List(); len(got) != 1 {
		t.Errorf("templates after refused pulls: %d, want only suid", len(got))
	}
	// Image size cap across layers.
	big := makeImage(t, goruntime.GOARCH, testutil.Tar(t, testutil.Entry{Name: "a", Body: strings.Repeat("a", 5000)}), testutil.Tar(t, testutil.Entry{Name: "b", Body: strings.Repeat("b", 5000)}))
	pushImage(t, push, "test/big:v1", big)
	if _, err := Pull(ctx, s, "big", reg.host+"/test/big:v1", Options{Insecure: true, MaxImageBytes: 8000}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("oversized image: %v", err)
	}
}

func TestPullCanceled(t *testing.T) {
	requireRoot(t)
	reg, push := newRegistry(t, nil)
	pushImage(t, push, "test/img:v1", makeImage(t, goruntime.GOARCH, testutil.Tar(t, testutil.Entry{Name: "f", Body: "x"})))
	s := openStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Pull(ctx, s, "img", reg.host+"/test/img:v1", Options{Insecure: true}); !errors.Is(err, errdefs.ErrCanceled) {
		t.Errorf("err = %v, want ErrCanceled", err)
	}
}

// TestPullUnreachable: a registry that refuses the connection is named in
// a message written for the caller (shown by the API), and the class says
// a retry may help.
func TestPullUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := openStore(t)
	_, err = Pull(context.Background(), s, "img", addr+"/test/img:v1", Options{Insecure: true})
	msg, ok := errdefs.PublicMessage(err)
	if !errors.Is(err, errdefs.ErrUnavailable) || !ok || !strings.Contains(msg, "the registry at "+addr+" refused the connection") {
		t.Fatalf("err = %v (public %q, %v), want unavailable naming the refusal", err, msg, ok)
	}
	if !strings.HasPrefix(msg, "pull "+addr+"/test/img:v1: ") {
		t.Errorf("public message %q does not name the image", msg)
	}
}

func TestNetworkCause(t *testing.T) {
	for _, c := range []struct {
		err   error
		class error
		msg   string
	}{
		{&net.DNSError{Name: "registry.invalid", Err: "no such host", IsNotFound: true, Server: "10.0.0.53:53"}, errdefs.ErrFailedPrecondition, "registry host registry.invalid does not exist"},
		{&net.DNSError{Name: "r.example", Err: "i/o timeout", IsTimeout: true, Server: "10.0.0.53:53"}, errdefs.ErrUnavailable, "cannot resolve the registry host r.example"},
		{fmt.Errorf("Get x: %w", x509.UnknownAuthorityError{}), errdefs.ErrFailedPrecondition, "TLS certificate is not trusted"},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), errdefs.ErrUnavailable, "closed the connection"},
	} {
		msg, class := networkCause(c.err)
		if class != c.class || !strings.Contains(msg, c.msg) || strings.Contains(msg, "10.0.0.53") {
			t.Errorf("networkCause(%v) = %q %v, want %v containing %q (and not the resolver)", c.err, msg, class, c.class, c.msg)
		}
	}
	if _, class := networkCause(errors.New("something else")); class != nil {
		t.Error("an unknown error got a public cause")
	}
}
