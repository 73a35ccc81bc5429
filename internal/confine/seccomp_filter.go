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
// the filter can see), the allowlist and the argument-checked calls are
// allowed, and everything else fails with EPERM.
func seccompPolicy(goarch string) (*seccomp.Policy, error) {
	allow, err := AllowedSyscalls(goarch)
	if err != nil {
		return nil, err
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
			{Names: []string{"clone3"}, Action: seccomp.ActionErrno | errNOSYS},
			{Names: allow, Action: seccomp.ActionAllow},
			{NamesWithCondtions: conditional, Action: seccomp.ActionAllow},
		},
	}, nil
}

// seccompProgram assembles the filter for the architecture this binary runs
// on. go-seccomp-bpf only assembles for runtime.GOARCH; its program starts by
// refusing foreign architectures (EPERM) and, on amd64, the x32 ABI (ENOSYS).
//
// In front of it goes a short hand-written prefix that refuses the
// terminal-injection ioctls. go-seccomp-bpf compares all 64 bits of an
// argument, but the kernel truncates ioctl's request to 32 bits, so a
// comparison of the full value could be bypassed by setting high bits
// (CVE-2019-10063); the prefix compares the low 32 bits only.
func seccompProgram() ([]bpf.Instruction, error) {
	info, err := archInfo(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	policy, err := seccompPolicy(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	body, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("confine: assemble seccomp filter: %v: %w", err, errdefs.ErrInternal)
	}
	nr, ok := info.SyscallNames["ioctl"]
	if !ok {
		return nil, fmt.Errorf("confine: no ioctl on %s: %w", info.Name, errdefs.ErrInternal)
	}
	// Offset of the low half of args[1] in seccomp_data.
	requestLo := uint32(dataArgs + 8*1)
	if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 { // big endian
		requestLo += 4
	}
	prefix := []bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: dataArch, Size: 4},
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(info.ID), SkipTrue: 6}, // -> 8
		/* 2 */ bpf.LoadAbsolute{Off: dataNR, Size: 4},
		/* 3 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(nr), SkipTrue: 4}, // -> 8
		/* 4 */ bpf.LoadAbsolute{Off: requestLo, Size: 4},
		/* 5 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: ioctlTIOCSTI, SkipTrue: 1}, // -> 7
		/* 6 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: ioctlTIOCLINUX, SkipTrue: 1}, // -> 8
		/* 7 */ bpf.RetConstant{Val: retErrno | errEPERM},
		// 8: go-seccomp-bpf's program, which reloads what it needs.
	}
	prog := append(prefix, body...)
	if len(prog) > 4096 { // BPF_MAXINSNS
		return nil, fmt.Errorf("confine: seccomp filter has %d instructions: %w", len(prog), errdefs.ErrInternal)
	}
	return prog, nil
}
