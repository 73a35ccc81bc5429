//go:build !linux

package agent

import "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"

// fileService is not supported off Linux: the file service depends on
// openat2 and inotify. Every RPC answers Unimplemented.
type fileService struct {
	agentv1connect.UnimplementedFileServiceHandler
}

func newFileService(a *Agent) (*fileService, error) { return &fileService{}, nil }
func (s *fileService) close() error                 { return nil }
