//go:build linux

package cgroups

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// BenchmarkExec measures what an exec cgroup adds to starting a process:
// "plain" forks and waits for /bin/true; "v1"/"v2" also do New, Start
// (moving the forking thread on v1, CLONE_INTO_CGROUP on v2) and Close.
//
//	go test -run '^$' -bench Exec -benchtime 2s ./internal/cgroups/
func BenchmarkExec(b *testing.B) {
	requireRoot(b)
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	ms := managers(b)
	for _, v := range []Version{V1, V2} {
		m := ms[v]
		if m == nil {
			continue
		}
		b.Run(v.String(), func(b *testing.B) {
			s := create(b, m, Limits{})
			d, err := s.Delegate()
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			home := d.Home
			if v == V1 {
				// The benchmark process is not in <id>/agent: return its
				// forking thread to where it is.
				home = selfCgroups(b, m)
			}
			dd, err := NewDelegated(v, d.Work, home)
			if err != nil {
				b.Fatal(err)
			}
			defer dd.Close()
			i := 0
			for b.Loop() {
				i++
				e, err := dd.New("b" + strconv.Itoa(i))
				if err != nil {
					b.Fatal(err)
				}
				cmd := exec.Command("/bin/true")
				cmd.SysProcAttr = &syscall.SysProcAttr{}
				if _, err := e.Start(cmd.SysProcAttr, func() (int, error) {
					if err := cmd.Start(); err != nil {
						return 0, err
					}
					return cmd.Process.Pid, nil
				}); err != nil {
					b.Fatal(err)
				}
				if err := cmd.Wait(); err != nil {
					b.Fatal(err)
				}
				if err := e.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// selfCgroups opens this process's own cgroup in every hierarchy of m.
func selfCgroups(b *testing.B, m *Manager) map[string]*os.File {
	cg := procCgroups(b, "/proc/self/cgroup")
	out := map[string]*os.File{}
	for _, h := range m.l.hiers {
		f, err := os.Open(filepath.Join(h.mount, cg[h.ctrls[0]]))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		out[h.name] = f
	}
	return out
}
