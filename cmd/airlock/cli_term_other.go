//go:build !linux

package main

import (
	"errors"
	"os"
)

var errNoTerminal = errors.New("terminal control is not supported on this platform")

// isTerminal reports false: terminals are handled on Linux only.
func isTerminal(f *os.File) bool { return false }

// makeRaw is not supported here.
func makeRaw(f *os.File) (restore func() error, err error) { return nil, errNoTerminal }

// termSize is not supported here.
func termSize(f *os.File) (cols, rows uint16, err error) { return 0, 0, errNoTerminal }

// notifyResize never delivers.
func notifyResize(ch chan<- os.Signal) (stop func()) { return func() {} }
