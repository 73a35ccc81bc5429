// Package mcptest is a small MCP server for tests of the gateway's MCP
// upstreams, built on the official Go SDK. Its tools:
//
//   - lookup (read-only): answers {"args": <its arguments>, "token":
//     <the credential it was given>, "token_sha256": <its digest>}, the
//     credential being the environment's MCPTEST_TOKEN (stdio) or the
//     request's Authorization header (Streamable HTTP);
//   - slow: sleeps for its argument ms (default 5000), or until the call
//     is canceled, then answers "done";
//   - fail: answers an error result (isError) "it failed: <msg>";
//   - text: answers its argument text as text content, twice;
//   - pid: answers the server's process id;
//   - mutating: answers "ok"; its description is what set_description
//     last set (at first "the original description");
//   - set_description: sets mutating's description to its argument.
//
// It serves over stdio (ServeStdioIfAsked, for a test binary that runs
// itself as the server; cmd/mcptest-server) and over Streamable HTTP
// (Handler).
package mcptest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// OriginalDescription is the mutating tool's description until
// set_description changes it.
const OriginalDescription = "the original description"

// ServeEnv is the environment variable that makes ServeStdioIfAsked
// serve: a test binary run with ServeEnv=1 is the stdio server.
const ServeEnv = "AIRLOCK_MCPTEST_SERVE"

// ServeStdioIfAsked serves MCP on stdin and stdout and exits when
// ServeEnv is "1"; else it returns at once. Call it from a test
// package's init, so that the test binary is also the server.
func ServeStdioIfAsked() {
	if os.Getenv(ServeEnv) != "1" {
		return
	}
	if err := NewServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Handler serves s over Streamable HTTP; nil s is a new server.
func Handler(s *mcp.Server) http.Handler {
	if s == nil {
		s = NewServer()
	}
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}

var objectSchema = json.RawMessage(`{"type":"object"}`)

// NewServer returns the test server.
func NewServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "1"}, &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{}})
	s.AddTool(&mcp.Tool{
		Name: "lookup", Description: "echoes its arguments and the credential it was given",
		InputSchema: objectSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args any
		_ = json.Unmarshal(req.Params.Arguments, &args)
		token := os.Getenv("MCPTEST_TOKEN")
		if req.Extra != nil && req.Extra.Header != nil {
			token = req.Extra.Header.Get("Authorization")
		}
		sum := sha256.Sum256([]byte(token))
		return &mcp.CallToolResult{StructuredContent: map[string]any{
			"args": args, "token": token, "token_sha256": hex.EncodeToString(sum[:]),
		}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "slow", Description: "sleeps", InputSchema: objectSchema},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				MS int `json:"ms"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			if args.MS == 0 {
				args.MS = 5000
			}
			select {
			case <-time.After(time.Duration(args.MS) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return text("done"), nil
		})
	s.AddTool(&mcp.Tool{Name: "fail", Description: "fails", InputSchema: objectSchema},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				Msg string `json:"msg"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			r := text("it failed: " + args.Msg)
			r.IsError = true
			return r, nil
		})
	s.AddTool(&mcp.Tool{Name: "text", Description: "answers text", InputSchema: objectSchema},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				Text string `json:"text"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: args.Text}, &mcp.TextContent{Text: args.Text}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "pid", Description: "answers its process id", InputSchema: objectSchema},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{StructuredContent: map[string]any{"pid": os.Getpid()}}, nil
		})
	addMutating(s, OriginalDescription)
	s.AddTool(&mcp.Tool{Name: "set_description", Description: "sets mutating's description", InputSchema: objectSchema},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				Description string `json:"description"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			addMutating(s, args.Description)
			return text("ok"), nil
		})
	return s
}

// SetDescription sets the mutating tool's description on s.
func SetDescription(s *mcp.Server, d string) { addMutating(s, d) }

func addMutating(s *mcp.Server, description string) {
	s.AddTool(&mcp.Tool{Name: "mutating", Description: description, InputSchema: objectSchema},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("ok"), nil
		})
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}
