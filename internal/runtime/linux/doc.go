// Package linux is Airlock's native sandbox backend: Linux namespaces,
// an overlayfs root with a size-capped writable layer, cgroups (v1 and v2),
// seccomp, landlock, no capabilities and no_new_privs, all in pure Go.
//
// A sandbox is one process tree. The daemon re-executes its own binary as
// the sandbox's PID 1 in new user, mount, PID, network, IPC and UTS
// namespaces (see spawn_linux.go); that process sets up the root
// filesystem, pivots into it, confines itself and then serves the agent
// protocol (internal/agent) on a unix socket whose listening fd the daemon
// passed in (see init_linux.go). Everything sandboxed code runs is a child
// of that agent and inherits its confinement.
//
// The agent is not a child the daemon has to keep: the daemon may exit or
// be killed and the sandbox keeps running. Each sandbox has a state
// directory holding its spec, the agent's pid and the control socket; on
// start the daemon re-adopts every sandbox whose agent answers and removes
// every trace of the others (Runtime.Recover).
//
// Host resources per sandbox, all removed by Destroy: a cgroup subtree
// (which also holds every process, so killing it kills the sandbox), a
// state directory, and a host uid/gid range. Mounts live only in the
// sandbox's own mount namespace and vanish with its last process.
package linux
