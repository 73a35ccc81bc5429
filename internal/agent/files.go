package agent

// PLACEHOLDER: replaced by the file service implementation.

import "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"

type fileService struct {
	agentv1connect.UnimplementedFileServiceHandler
}

func newFileService(a *Agent) (*fileService, error) { return &fileService{}, nil }
func (s *fileService) close() error                 { return nil }
