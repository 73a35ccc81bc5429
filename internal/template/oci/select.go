package oci

import (
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Annotations that name an image in an index.
const (
	annotationRefName   = "org.opencontainers.image.ref.name"
	annotationImageName = "io.containerd.image.name"
	maxIndexDepth       = 4
	maxIndexManifests   = 1024
)

// selectFromIndex picks the image for plat from idx. With ref set, only
// the manifests whose ref-name annotation is ref (or ends in ":"+ref)
// qualify. A manifest without a platform qualifies when it is the only
// candidate (the config's platform is checked later). Nested indexes are
// searched up to maxIndexDepth.
func selectFromIndex(idx v1.ImageIndex, ref string, plat v1.Platform, depth int) (v1.Image, error) {
	if depth > maxIndexDepth {
		return nil, fmt.Errorf("image index nested too deeply: %w", errdefs.ErrInvalidArgument)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read image index: %w", sourceError(err))
	}
	if len(im.Manifests) > maxIndexManifests {
		return nil, fmt.Errorf("image index lists %d manifests, at most %d are supported: %w", len(im.Manifests), maxIndexManifests, errdefs.ErrInvalidArgument)
	}
	cands := im.Manifests
	if ref != "" {
		cands = nil
		for _, d := range im.Manifests {
			for _, key := range []string{annotationRefName, annotationImageName} {
				if n := d.Annotations[key]; n != "" && (n == ref || strings.HasSuffix(n, ":"+ref)) {
					cands = append(cands, d)
					break
				}
			}
		}
		if len(cands) == 0 {
			return nil, fmt.Errorf("no image named %q in the index: %w", truncate(ref, 100), errdefs.ErrNotFound)
		}
	}
	var unplatformed []v1.Descriptor
	for _, d := range cands {
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("read nested index: %w", sourceError(err))
			}
			if img, err := selectFromIndex(child, "", plat, depth+1); err == nil {
				return img, nil
			}
		case d.MediaType.IsImage():
			if d.Platform == nil {
				unplatformed = append(unplatformed, d)
				continue
			}
			if d.Platform.Satisfies(plat) {
				return image(idx, d)
			}
		}
	}
	if len(unplatformed) == 1 {
		return image(idx, unplatformed[0])
	}
	return nil, fmt.Errorf("image has no variant for %s: %w", plat.String(), errdefs.ErrNotFound)
}

func image(idx v1.ImageIndex, d v1.Descriptor) (v1.Image, error) {
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, fmt.Errorf("read image %s: %w", d.Digest, sourceError(err))
	}
	return img, nil
}
