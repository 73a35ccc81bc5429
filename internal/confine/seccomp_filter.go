package confine

import (
	"encoding/binary"
	"fmt"
	"runtime"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Seccomp return values (SECCOMP_RET_*), as the kernel sees them.
const (
	retAllow = uint32(seccomp.ActionAllow)
	retErrno = uint32(seccomp.ActionErrno)
	errEPERM = 1
	errNOSYS = 38
)

// Offsets into struct seccomp_data.
const (
	dataNR   = 0
	dataArch = 4
	dataArgs = 16
)

// archInfo returns go-seccomp-bpf's description of goarch.
func archInfo(goarch string) (*arch.Info, error) {
	switch goarch {
	case "amd64":
		return arch.X86_64, nil
	case "arm64":
		return arch.AARCH64, nil
	}
	return nil, fmt.Errorf("confine: seccomp filter for %s: %w", goarch, errdefs.ErrNotSupported)
}

// seccompPolicy turns the rule tables into a go-seccomp-bpf policy for
// goarch: clone3 fails with ENOSYS (so libc falls back to clone, whose flags
// the filter can see) unless clone3 is set (see Policy.Clone3), the
// allowlist and the argument-checked calls are allowed, and everything else
// fails with EPERM.
func seccompPolicy(goarch string, clone3 bool) (*seccomp.Policy, error) {
	allow, err := AllowedSyscalls(goarch)
	if err != nil {
		return nil, err
	}
	clone3Action := seccomp.ActionErrno | errNOSYS
	if clone3 {
		clone3Action = seccomp.ActionAllow
	}
	var conditional []seccomp.NameWithConditions
	conditional = append(conditional, seccomp.NameWithConditions{
		Name: "clone",
		Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.BitsNotSet, Value: cloneNamespaceMask},
		},
	})
	for _, family := range allowedSocketFamilies {
		conditional = append(conditional, seccomp.NameWithConditions{
			Name:       "socket",
			Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.Equal, Value: family}},
		})
	}
	for _, persona := range allowedPersonalities {
		conditional = append(conditional, seccomp.NameWithConditions{
			Name:       "personality",
			Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.Equal, Value: persona}},
		})
	}
	return &seccomp.Policy{
		DefaultAction: seccomp.ActionErrno, // EPERM
		Syscalls: []seccomp.SyscallGroup{
			{Names: []string{"clone3"}, Action: clone3Action},
			{Names: allow, Action: seccomp.ActionAllow},
			{NamesWithCondtions: conditional, Action: seccomp.ActionAllow},
		},
	}, nil
}

// seccompProgram assembles the filter for the architecture this binary runs
// on. go-seccomp-bpf only assembles for runtime.GOARCH; its program starts by
// refusing foreign architectures (EPERM) and, on amd64, the x32 ABI (ENOSYS).
//
// In front of it goes a prefix that applies argDenials. go-seccomp-bpf
// compares all 64 bits of an argument, but the kernel truncates int
// parameters (ioctl's request, a signal number, a pid) to 32 bits, so a
// comparison of the full value could be bypassed by setting high bits
// (CVE-2019-10063); the prefix compares the low 32 bits where the kernel
// does.
func seccompProgram(clone3 bool) ([]bpf.Instruction, error) {
	info, err := archInfo(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	policy, err := seccompPolicy(runtime.GOARCH, clone3)
	if err != nil {
		return nil, err
	}
	body, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("confine: assemble seccomp filter: %v: %w", err, errdefs.ErrInternal)
	}
	prefix, err := denialPrefix(info, argDenials)
	if err != nil {
		return nil, err
	}
	prog := append(prefix, body...)
	if len(prog) > 4096 { // BPF_MAXINSNS
		return nil, fmt.Errorf("confine: seccomp filter has %d instructions: %w", len(prog), errdefs.ErrInternal)
	}
	return prog, nil
}

// denialPrefix compiles denials into BPF that returns EPERM for a call one
// of them refuses and otherwise falls through to whatever follows it:
//
//	ld arch; jne native -> end
//	for each denial:
//	    ld nr; jne nr(name) -> next
//	    for each test: load the argument's words; jump -> next unless it holds
//	    ret EPERM
//	next:
//	end:
func denialPrefix(info *arch.Info, denials []argDenial) ([]bpf.Instruction, error) {
	// Offsets of the two halves of argument i in seccomp_data.
	lo := func(i int) uint32 { return uint32(dataArgs + 8*i) }
	hi := func(i int) uint32 { return uint32(dataArgs + 8*i + 4) }
	if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 { // big endian
		lo, hi = hi, lo
	}
	var a bpfAsm
	end := a.newLabel()
	a.emit(bpf.LoadAbsolute{Off: dataArch, Size: 4})
	a.jumpIf(bpf.JumpNotEqual, uint32(info.ID), end)
	for _, d := range denials {
		nr, ok := info.SyscallNames[d.name]
		if !ok {
			return nil, fmt.Errorf("confine: no %s on %s: %w", d.name, info.Name, errdefs.ErrInternal)
		}
		next := a.newLabel()
		a.emit(bpf.LoadAbsolute{Off: dataNR, Size: 4})
		a.jumpIf(bpf.JumpNotEqual, uint32(nr), next)
		for _, t := range d.tests {
			if t.arg < 0 || t.arg > 5 {
				return nil, fmt.Errorf("confine: %s: argument %d: %w", d.name, t.arg, errdefs.ErrInternal)
			}
			a.emit(bpf.LoadAbsolute{Off: lo(t.arg), Size: 4})
			switch t.kind {
			case lowIn:
				if len(t.values) == 0 {
					return nil, fmt.Errorf("confine: %s: empty value set: %w", d.name, errdefs.ErrInternal)
				}
				holds := a.newLabel()
				last := len(t.values) - 1
				for _, v := range t.values[:last] {
					a.jumpIf(bpf.JumpEqual, v, holds)
				}
				a.jumpIf(bpf.JumpNotEqual, t.values[last], next)
				a.place(holds)
			case lowNonzero:
				a.jumpIf(bpf.JumpEqual, 0, next)
			case nonzero:
				holds := a.newLabel()
				a.jumpIf(bpf.JumpNotEqual, 0, holds)
				a.emit(bpf.LoadAbsolute{Off: hi(t.arg), Size: 4})
				a.jumpIf(bpf.JumpEqual, 0, next)
				a.place(holds)
			default:
				return nil, fmt.Errorf("confine: %s: test kind %d: %w", d.name, t.kind, errdefs.ErrInternal)
			}
		}
		a.emit(bpf.RetConstant{Val: retErrno | errEPERM})
		a.place(next)
	}
	a.place(end)
	return a.finish()
}

// bpfAsm assembles classic BPF with forward jumps to labels.
type bpfAsm struct {
	ins    []bpf.Instruction
	labels []int // instruction index of each label; -1 until placed
	jumps  []labelJump
}

// labelJump is a JumpIf at index at whose true branch goes to label.
type labelJump struct{ at, label int }

func (a *bpfAsm) newLabel() int {
	a.labels = append(a.labels, -1)
	return len(a.labels) - 1
}

// place puts label l at the next instruction.
func (a *bpfAsm) place(l int) { a.labels[l] = len(a.ins) }

func (a *bpfAsm) emit(i bpf.Instruction) { a.ins = append(a.ins, i) }

// jumpIf jumps to label l when `A cond val`, and falls through otherwise.
func (a *bpfAsm) jumpIf(cond bpf.JumpTest, val uint32, l int) {
	a.jumps = append(a.jumps, labelJump{at: len(a.ins), label: l})
	a.emit(bpf.JumpIf{Cond: cond, Val: val})
}

// finish resolves the jumps; every label must be placed and within reach
// of a conditional jump (255 instructions).
func (a *bpfAsm) finish() ([]bpf.Instruction, error) {
	for _, j := range a.jumps {
		to := a.labels[j.label]
		skip := to - j.at - 1
		if to < 0 || skip < 0 || skip > 255 {
			return nil, fmt.Errorf("confine: seccomp prefix: jump from %d to label %d at %d: %w", j.at, j.label, to, errdefs.ErrInternal)
		}
		ji := a.ins[j.at].(bpf.JumpIf)
		ji.SkipTrue = uint8(skip)
		a.ins[j.at] = ji
	}
	return a.ins, nil
}
