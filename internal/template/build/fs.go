package build

import "time"

// File types (the S_IFMT bits of a mode), the same on every Unix.
const (
	typDir  = 0o040000
	typReg  = 0o100000
	typLnk  = 0o120000
	typChr  = 0o020000
	typFifo = 0o010000
)

// fileStat is what the builder needs to know about a file: its type
// (S_IFMT bits), permission bits (07777), owner, size, times and identity.
type fileStat struct {
	typ, perm uint32
	uid, gid  int
	size      int64
	mtime     time.Time
	rdev      uint64
	dev, ino  uint64
	nlink     uint64
}

func (s fileStat) isDir() bool     { return s.typ == typDir }
func (s fileStat) isSymlink() bool { return s.typ == typLnk }
func (s fileStat) isRegular() bool { return s.typ == typReg }

// isWhiteout reports an overlayfs whiteout: a character device 0:0.
func (s fileStat) isWhiteout() bool { return s.typ == typChr && s.rdev == 0 }
