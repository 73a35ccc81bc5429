package openai

import (
	"encoding/json"
	"fmt"
	"strings"
)

// RunProgramName is the function tool this route runs: its arguments
// are {"language": "python"|"javascript"|"bash", "code": "...",
// "timeout_s": N}, and it runs the program in the sandbox with the tools
// granted to it (POST /v1/sandboxes/{id}/run).
const RunProgramName = "airlock_run_program"

// The item types this route answers, and those of their answers.
const (
	typeShellCall        = "shell_call"
	typeShellOutput      = "shell_call_output"
	typeLocalShellCall   = "local_shell_call"
	typeLocalShellOutput = "local_shell_call_output"
	typeApplyPatchCall   = "apply_patch_call"
	typeApplyPatchOutput = "apply_patch_call_output"
	typeFunctionCall     = "function_call"
	typeFunctionOutput   = "function_call_output"
	typeCustomToolCall   = "custom_tool_call"
	typeCustomToolOutput = "custom_tool_call_output"
)

// outputOf maps a call type to its answer's type.
var outputOf = map[string]string{
	typeShellCall:      typeShellOutput,
	typeLocalShellCall: typeLocalShellOutput,
	typeApplyPatchCall: typeApplyPatchOutput,
	typeFunctionCall:   typeFunctionOutput,
	typeCustomToolCall: typeCustomToolOutput,
}

// item is the part of an output item this route reads; the rest of it
// (ids, status, messages' content) is left alone.
type item struct {
	Type        string          `json:"type"`
	ID          string          `json:"id"`
	CallID      string          `json:"call_id"`
	Name        string          `json:"name"`
	Arguments   string          `json:"arguments"`
	Action      json.RawMessage `json:"action"`
	Operation   json.RawMessage `json:"operation"`
	Environment json.RawMessage `json:"environment"`
	Caller      json.RawMessage `json:"caller"`
}

// shellAction is a shell_call's action.
type shellAction struct {
	Commands        []string `json:"commands"`
	TimeoutMS       *int64   `json:"timeout_ms"`
	MaxOutputLength *int     `json:"max_output_length"`
}

// localAction is a local_shell_call's action. User is the model's wish,
// which is not followed: the request's user runs the command.
type localAction struct {
	Type             string            `json:"type"`
	Command          []string          `json:"command"`
	Env              map[string]string `json:"env"`
	TimeoutMS        *int64            `json:"timeout_ms"`
	WorkingDirectory string            `json:"working_directory"`
	User             string            `json:"user"`
}

// patchOp is an apply_patch_call's operation.
type patchOp struct {
	Type string  `json:"type"`
	Path string  `json:"path"`
	Diff *string `json:"diff"`
}

// programArgs are airlock_run_program's arguments.
type programArgs struct {
	Language string `json:"language"`
	Code     string `json:"code"`
	TimeoutS int64  `json:"timeout_s"`
}

// call is one call this route runs. A call the model got wrong (a
// malformed action, too many commands) has problem set and is answered
// with a failure the model sees.
type call struct {
	Type    string
	CallID  string
	Caller  json.RawMessage
	Shell   shellAction
	Local   localAction
	Patch   patchOp
	Program programArgs
	problem string
}

// scopes are the scopes of Airlock's API that running c needs.
func (c *call) scopes() []string {
	switch c.Type {
	case typeApplyPatchCall:
		return []string{"files"}
	case typeFunctionCall:
		return []string{"exec", "tools:call"}
	}
	return []string{"exec"}
}

// parseCalls picks the calls this route runs out of a response's output
// items, in order, and the call_ids of the function and custom tool
// calls it leaves to the caller. Calls answered in the output already
// (those of hosted tools, which OpenAI ran) and shell calls of a hosted
// container are skipped. Items that are not objects with a type, and
// calls without a call_id, are errors.
func parseCalls(raw []json.RawMessage) (calls []*call, unhandled []string, err error) {
	items := make([]item, len(raw))
	answered := map[string]bool{}
	for i, r := range raw {
		if err := json.Unmarshal(r, &items[i]); err != nil || items[i].Type == "" {
			return nil, nil, fmt.Errorf("output[%d] is not an output item (an object with a type)", i)
		}
		if strings.HasSuffix(items[i].Type, "_output") && items[i].CallID != "" {
			answered[items[i].Type+" "+items[i].CallID] = true
		}
	}
	unhandled = []string{}
	for i, it := range items {
		out, isCall := outputOf[it.Type]
		if !isCall {
			continue
		}
		if err := checkCallID(it.CallID); err != nil {
			return nil, nil, fmt.Errorf("output[%d] (%s): %v", i, it.Type, err)
		}
		if answered[out+" "+it.CallID] {
			continue
		}
		c := &call{Type: it.Type, CallID: it.CallID}
		if string(it.Caller) != "null" {
			c.Caller = it.Caller
		}
		switch it.Type {
		case typeShellCall:
			if hosted(it.Environment) {
				continue
			}
			c.problem = decodeAction(it.Action, &c.Shell)
			if c.problem == "" {
				c.problem = checkCommands(c.Shell.Commands)
			}
		case typeLocalShellCall:
			c.problem = decodeAction(it.Action, &c.Local)
			if c.problem == "" {
				c.problem = checkArgv(c.Local)
			}
		case typeApplyPatchCall:
			c.problem = decodeAction(it.Operation, &c.Patch)
			if c.problem == "" {
				c.problem = checkPatch(c.Patch)
			}
		case typeFunctionCall:
			if it.Name != RunProgramName {
				unhandled = append(unhandled, it.CallID)
				continue
			}
			c.problem = checkProgram(it.Arguments, &c.Program)
		case typeCustomToolCall:
			unhandled = append(unhandled, it.CallID)
			continue
		}
		calls = append(calls, c)
	}
	if len(calls) > maxCalls {
		return nil, nil, fmt.Errorf("at most %d tool calls per request (the output has %d)", maxCalls, len(calls))
	}
	return calls, unhandled, nil
}

func checkCallID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("call_id is required")
	case len(id) > 256:
		return fmt.Errorf("call_id is longer than 256 bytes")
	}
	return nil
}

// hosted reports whether a shell call's environment is one OpenAI runs
// (a container), not the local one the caller runs.
func hosted(env json.RawMessage) bool {
	var e struct {
		Type string `json:"type"`
	}
	if len(env) == 0 || string(env) == "null" || json.Unmarshal(env, &e) != nil {
		return false
	}
	return e.Type != "" && e.Type != "local"
}

func decodeAction(raw json.RawMessage, v any) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "the call has no action"
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return "the call's action is malformed: " + err.Error()
	}
	return ""
}

func checkCommands(cmds []string) string {
	switch {
	case len(cmds) == 0:
		return "the call has no commands"
	case len(cmds) > maxCommands:
		return fmt.Sprintf("at most %d commands per call", maxCommands)
	}
	for _, c := range cmds {
		if len(c) > maxCommandBytes {
			return fmt.Sprintf("a command is longer than %d bytes", maxCommandBytes)
		}
		if strings.ContainsRune(c, 0) {
			return "a command contains a NUL byte"
		}
	}
	return ""
}

func checkArgv(a localAction) string {
	if a.Type != "" && a.Type != "exec" {
		return fmt.Sprintf("unknown action type %q", a.Type)
	}
	if len(a.Command) == 0 {
		return "the call has no command"
	}
	n := 0
	for _, arg := range a.Command {
		n += len(arg)
		if strings.ContainsRune(arg, 0) {
			return "the command contains a NUL byte"
		}
	}
	if n > maxCommandBytes {
		return fmt.Sprintf("the command is longer than %d bytes", maxCommandBytes)
	}
	if len(a.Env) > maxEnv {
		return fmt.Sprintf("at most %d environment variables", maxEnv)
	}
	return ""
}

func checkPatch(op patchOp) string {
	switch {
	case op.Type != "create_file" && op.Type != "update_file" && op.Type != "delete_file":
		return fmt.Sprintf("unknown operation %q (create_file, update_file or delete_file)", op.Type)
	case strings.TrimSpace(op.Path) == "":
		return "the operation has no path"
	case len(op.Path) > 4096 || strings.ContainsRune(op.Path, 0):
		return "the path is not valid"
	case op.Type != "delete_file" && op.Diff == nil:
		return "the operation has no diff"
	case op.Diff != nil && len(*op.Diff) > maxPatchFile:
		return fmt.Sprintf("the diff is larger than %d bytes", maxPatchFile)
	}
	return ""
}

func checkProgram(args string, p *programArgs) string {
	dec := json.NewDecoder(strings.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return "the arguments are not valid: " + err.Error()
	}
	if p.Language == "" {
		p.Language = "python"
	}
	switch {
	case p.Language != "python" && p.Language != "javascript" && p.Language != "bash":
		return `language must be "python", "javascript" or "bash"`
	case strings.TrimSpace(p.Code) == "":
		return "code is required"
	case len(p.Code) > maxCommandBytes:
		return fmt.Sprintf("code is longer than %d bytes", maxCommandBytes)
	case p.TimeoutS < 0 || p.TimeoutS > int64(maxTimeout.Seconds()):
		return fmt.Sprintf("timeout_s must be between 0 and %d", int64(maxTimeout.Seconds()))
	}
	return ""
}
