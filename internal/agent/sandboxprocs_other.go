//go:build !linux

package agent

import "syscall"

func killNamespace() error { return errNoProcesses }

func signalOne(int, syscall.Signal, func(procStat) bool) error { return errNoProcesses }

func (t *processTable) reapNow() {}
