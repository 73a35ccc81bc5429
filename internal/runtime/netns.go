package runtime

import "os"

// NetNS is the optional ability of an instance whose sandbox has a
// network namespace of its own that the host may plug an interface into
// (the open network mode: see internal/opennet). OpenNetNS returns a
// descriptor of that namespace, which the caller closes; it fails once
// the sandbox has ended.
type NetNS interface {
	OpenNetNS() (*os.File, error)
}
