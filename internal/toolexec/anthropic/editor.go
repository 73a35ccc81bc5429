package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/toolexec/inflight"
)

// The text editor (text_editor_20250728): view, create, str_replace and
// insert through the files API, with the messages of Anthropic's
// reference implementation where it documents them.

// fileAPI is what of the API the editor uses: *client.Client.
type fileAPI interface {
	StatFile(ctx context.Context, id, path string, opts ...client.FileOption) (*client.FileInfo, error)
	ReadFile(ctx context.Context, id, path string, opts ...client.FileOption) (io.ReadCloser, error)
	WriteFile(ctx context.Context, id, path string, r io.Reader, opts ...client.FileOption) (*client.FileInfo, error)
	ListDir(ctx context.Context, id, path string, depth int, opts ...client.FileOption) ([]client.FileInfo, bool, error)
}

var _ fileAPI = (*client.Client)(nil)

// editor runs the editor's commands in one sandbox as one user.
type editor struct {
	fs      fileAPI
	sandbox string
	user    string
	maxFile int64
	// limit is the most bytes of numbered lines a result builds (what
	// the answer can still carry); slots, when set, are the handler's
	// file slots (see bounds.go).
	limit int
	slots chan struct{}
}

func (x *run) editor(ctx context.Context, input map[string]any) (string, error) {
	e := &editor{fs: x.k.c, sandbox: x.sb.ID, user: x.o.user, maxFile: x.o.maxFile, limit: x.budget.left, slots: x.h.files}
	return e.run(ctx, input)
}

func (e *editor) opts() []client.FileOption { return []client.FileOption{client.AsUser(e.user)} }

func (e *editor) run(ctx context.Context, input map[string]any) (string, error) {
	command, ok := input["command"].(string)
	if !ok {
		return "", toolError("Parameter `command` is required.")
	}
	path, ok := input["path"].(string)
	if !ok || path == "" || strings.IndexByte(path, 0) >= 0 {
		return "", toolError("Parameter `path` is required and must be a file path.")
	}
	if e.slots != nil && (command == "view" || command == "str_replace" || command == "insert") {
		// The file is held several times over while it is edited.
		free, err := inflight.Slot(ctx, e.slots)
		if err != nil {
			return "", err
		}
		defer free()
	}
	switch command {
	case "view":
		return e.view(ctx, path, input)
	case "create":
		text, err := stringArg(input, "file_text", command)
		if err != nil {
			return "", err
		}
		st, err := e.stat(ctx, path)
		var te toolError
		if err != nil && !errors.As(err, &te) {
			return "", err
		}
		if st != nil && st.Type == "dir" {
			return "", toolErrorf("The path %s is a directory.", path)
		}
		if _, err := e.fs.WriteFile(ctx, e.sandbox, path, strings.NewReader(text), e.opts()...); err != nil {
			return "", err
		}
		return "File created successfully at: " + path, nil
	case "str_replace":
		return e.strReplace(ctx, path, input)
	case "insert":
		return e.insert(ctx, path, input)
	case "undo_edit":
		return "", toolError("The command undo_edit is not supported by text_editor_20250728.")
	}
	q, _ := json.Marshal(command)
	return "", toolErrorf("Unrecognized command %s. The allowed commands are: view, create, str_replace, insert.", q)
}

func stringArg(input map[string]any, name, command string) (string, error) {
	v, ok := input[name].(string)
	if !ok {
		return "", toolErrorf("Parameter `%s` is required for command: %s", name, command)
	}
	return v, nil
}

// intArg is v as an integer, if it is one.
func intArg(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	if i, err := n.Int64(); err == nil {
		return i, true
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// stat is the entry at path, or a toolError when there is none.
func (e *editor) stat(ctx context.Context, path string) (*client.FileInfo, error) {
	st, err := e.fs.StatFile(ctx, e.sandbox, path, e.opts()...)
	if errors.Is(err, client.ErrNotFound) {
		return nil, toolErrorf("The path %s does not exist.", path)
	}
	return st, err
}

// regular refuses a path that is not a regular file.
func (e *editor) regular(ctx context.Context, path string) error {
	st, err := e.stat(ctx, path)
	if err != nil {
		return err
	}
	switch st.Type {
	case "file":
		return nil
	case "dir":
		return toolErrorf("The path %s is a directory; only view works on a directory.", path)
	}
	return toolErrorf("The path %s is not a regular file.", path)
}

// readText is the file's text, and whether its lines end in CRLF (every
// one of them: then the text has them as LF).
func (e *editor) readText(ctx context.Context, path string) (string, bool, error) {
	rc, err := e.fs.ReadFile(ctx, e.sandbox, path, e.opts()...)
	if errors.Is(err, client.ErrNotFound) {
		return "", false, toolErrorf("The path %s does not exist.", path)
	}
	if err != nil {
		return "", false, err
	}
	defer discard(rc)
	b, err := io.ReadAll(io.LimitReader(rc, e.maxFile+1))
	if err != nil {
		return "", false, err
	}
	if int64(len(b)) > e.maxFile {
		return "", false, toolErrorf("The file %s is larger than %d bytes; view a part of it with bash (sed -n, head, tail).", path, e.maxFile)
	}
	return decodeText(path, b)
}

// decodeText checks that b is text and undoes CRLF line ends.
func decodeText(path string, b []byte) (string, bool, error) {
	if !utf8.Valid(b) {
		return "", false, toolErrorf("The file %s is not UTF-8 text (a binary file?); it cannot be viewed or edited with this tool.", path)
	}
	text := string(b)
	if strings.IndexByte(text, 0) >= 0 {
		return "", false, toolErrorf("The file %s contains NUL bytes (a binary file?); it cannot be viewed or edited with this tool.", path)
	}
	lf := strings.Count(text, "\n")
	crlf := lf > 0 && strings.Count(text, "\r\n") == lf
	if crlf {
		text = strings.ReplaceAll(text, "\r\n", "\n")
	}
	return text, crlf, nil
}

func (e *editor) writeText(ctx context.Context, path, text string, crlf bool) error {
	if crlf {
		text = strings.ReplaceAll(text, "\n", "\r\n")
	}
	_, err := e.fs.WriteFile(ctx, e.sandbox, path, strings.NewReader(text), e.opts()...)
	return err
}

// lineCount is the number of lines of text (a last line without a
// newline counts).
func lineCount(text string) int {
	if text == "" {
		return 0
	}
	n := strings.Count(text, "\n") + 1
	if strings.HasSuffix(text, "\n") {
		n--
	}
	return n
}

// numbered is lines from to to (0-based, to excluded) of text, numbered
// as cat -n prints them, and how many characters that is whole; it stops
// building past limit bytes (what a result can carry), so that a file of
// empty lines does not become nine times its size in the daemon.
func numbered(text string, from, to, limit int) (string, int) {
	var sb strings.Builder
	total := 0
	rest := text
	for i := 0; i < to && rest != ""; i++ {
		l := rest
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			l, rest = rest[:nl], rest[nl+1:]
		} else {
			rest = ""
		}
		if i < from {
			continue
		}
		l = strings.TrimSuffix(l, "\r")
		num := strconv.Itoa(i + 1)
		if i > from {
			total++
		}
		total += max(6, len(num)) + 1 + utf8.RuneCountInString(l)
		if sb.Len() > limit {
			continue
		}
		if room := limit - sb.Len() + 1; len(l) > room {
			// One byte past limit, so that the result is seen cut.
			for room > 0 && !utf8.RuneStart(l[room]) {
				room--
			}
			l = l[:room]
		}
		if i > from {
			sb.WriteByte('\n')
		}
		for range 6 - len(num) {
			sb.WriteByte(' ')
		}
		sb.WriteString(num)
		sb.WriteByte('\t')
		sb.WriteString(l)
	}
	return sb.String(), total
}

func (e *editor) view(ctx context.Context, path string, input map[string]any) (string, error) {
	max := int64(-1)
	if v, ok := input["max_characters"]; ok && v != nil {
		n, ok := intArg(v)
		if !ok || n <= 0 {
			return "", toolError("Parameter `max_characters` must be a positive integer.")
		}
		max = n
	}
	rng, hasRange := input["view_range"]
	hasRange = hasRange && rng != nil
	st, err := e.stat(ctx, path)
	if err != nil {
		return "", err
	}
	var out string
	total := -1 // the characters of the whole output, when out is cut short
	switch st.Type {
	case "dir":
		if hasRange {
			return "", toolError("The `view_range` parameter is not allowed when `path` points to a directory.")
		}
		entries, truncated, err := e.fs.ListDir(ctx, e.sandbox, path, 2, e.opts()...)
		if err != nil {
			return "", err
		}
		root := strings.TrimRight(st.Path, "/")
		var lines []string
		for _, en := range entries {
			rel := strings.TrimPrefix(en.Path, root+"/")
			if slices.ContainsFunc(strings.Split(rel, "/"), func(c string) bool { return strings.HasPrefix(c, ".") }) {
				continue
			}
			if en.Type == "dir" {
				lines = append(lines, en.Path+"/")
			} else {
				lines = append(lines, en.Path)
			}
		}
		slices.Sort(lines)
		out = "Here are the files and directories up to 2 levels deep in " + st.Path + ", excluding hidden items:\n" +
			strings.Join(append([]string{root + "/"}, lines...), "\n")
		if truncated {
			out += "\n[the listing was cut: the directory has more entries]"
		}
		out += "\n"
	case "file":
		text, _, err := e.readText(ctx, path)
		if err != nil {
			return "", err
		}
		n := lineCount(text)
		first, last := 1, n
		if hasRange {
			arr, ok := rng.([]any)
			var a, b int64
			if ok && len(arr) == 2 {
				var oka, okb bool
				a, oka = intArg(arr[0])
				b, okb = intArg(arr[1])
				ok = oka && okb
			} else {
				ok = false
			}
			if !ok {
				return "", toolError("Invalid `view_range`. It should be a list of two integers.")
			}
			r := fmt.Sprintf("[%d,%d]", a, b)
			switch {
			case a < 1 || a > int64(n):
				return "", toolErrorf("Invalid `view_range`: %s. Its first element `%d` should be within the range of lines of the file: [1, %d]", r, a, n)
			case b != -1 && b > int64(n):
				return "", toolErrorf("Invalid `view_range`: %s. Its second element `%d` should be smaller than the number of lines in the file: `%d`", r, b, n)
			case b != -1 && b < a:
				return "", toolErrorf("Invalid `view_range`: %s. Its second element `%d` should be larger or equal than its first `%d`", r, b, a)
			}
			first = int(a)
			if b != -1 {
				last = int(b)
			}
		}
		head := "Here's the result of running `cat -n` on " + path + ":\n"
		// Built up to what can be shown: max characters (4 bytes at
		// most each), and no more than the answer carries.
		limit := e.limit
		if max >= 0 && max < int64(limit)/4 {
			limit = int(max) * 4
		}
		lines, n := numbered(text, first-1, last, limit)
		out = head + lines + "\n"
		total = utf8.RuneCountInString(head) + n + 1
	default:
		return "", toolErrorf("The path %s is not a regular file or directory.", path)
	}
	if total < 0 {
		total = utf8.RuneCountInString(out)
	}
	if max >= 0 && int64(total) > max {
		cut := 0
		for i := int64(0); i < max && cut < len(out); i++ {
			_, size := utf8.DecodeRuneInString(out[cut:])
			cut += size
		}
		out = fmt.Sprintf("%s\n[output truncated to %d of %d characters]", out[:cut], max, total)
	}
	return out, nil
}

// snippet is a few numbered lines around count lines from line start
// (0-based).
// It builds at most limit bytes of lines.
func snippet(path, text string, start, count, limit int) string {
	from := max(0, start-4)
	to := max(from, min(lineCount(text), start+count+4))
	lines, _ := numbered(text, from, to, limit)
	return "Here's the result of running `cat -n` on a snippet of " + path + ":\n" + lines + "\n"
}

func (e *editor) strReplace(ctx context.Context, path string, input map[string]any) (string, error) {
	oldStr, err := stringArg(input, "old_str", "str_replace")
	if err != nil {
		return "", err
	}
	newStr := ""
	if v, ok := input["new_str"]; ok && v != nil {
		s, ok := v.(string)
		if !ok {
			return "", toolError("Parameter `new_str` must be a string.")
		}
		newStr = s
	}
	if oldStr == "" {
		return "", toolError("Parameter `old_str` must not be empty.")
	}
	if err := e.regular(ctx, path); err != nil {
		return "", err
	}
	text, crlf, err := e.readText(ctx, path)
	if err != nil {
		return "", err
	}
	if crlf {
		oldStr = strings.ReplaceAll(oldStr, "\r\n", "\n")
		newStr = strings.ReplaceAll(newStr, "\r\n", "\n")
	}
	switch count := strings.Count(text, oldStr); count {
	case 0:
		return "", toolError("No match found for replacement. Please check your text and try again.")
	case 1:
	default:
		return "", toolErrorf("Found %d matches for replacement text. Please provide more context to make a unique match.", count)
	}
	at := strings.Index(text, oldStr)
	edited := text[:at] + newStr + text[at+len(oldStr):]
	if err := e.writeText(ctx, path, edited, crlf); err != nil {
		return "", err
	}
	startLine := strings.Count(text[:at], "\n")
	return "The file " + path + " has been edited. " + snippet(path, edited, startLine, strings.Count(newStr, "\n")+1, e.limit) +
		"Review the changes and make sure they are as expected. Edit the file again if necessary.", nil
}

func (e *editor) insert(ctx context.Context, path string, input map[string]any) (string, error) {
	addV, ok := input["new_str"]
	if !ok || addV == nil {
		addV = input["insert_text"]
	}
	add, ok := addV.(string)
	if !ok {
		return "", toolError("Parameter `new_str` (or `insert_text`) is required for command: insert")
	}
	k64, ok := intArg(input["insert_line"])
	if !ok {
		return "", toolError("Parameter `insert_line` is required for command: insert and must be an integer.")
	}
	if err := e.regular(ctx, path); err != nil {
		return "", err
	}
	text, crlf, err := e.readText(ctx, path)
	if err != nil {
		return "", err
	}
	if crlf {
		add = strings.ReplaceAll(add, "\r\n", "\n")
	}
	n := lineCount(text)
	if k64 < 0 || k64 > int64(n) {
		return "", toolErrorf("Invalid `insert_line` parameter: %d. It should be within the range of lines of the file: [0, %d]", k64, n)
	}
	k := int(k64)
	// The offset just after line k, giving the file a last newline where
	// it lacks one.
	base, off := text, 0
	for range k {
		i := strings.IndexByte(base[off:], '\n')
		if i < 0 {
			off = len(base)
			break
		}
		off += i + 1
	}
	if k == n && n > 0 && !strings.HasSuffix(base, "\n") {
		base += "\n"
		off = len(base)
	}
	block := add
	if add != "" && !strings.HasSuffix(add, "\n") {
		block += "\n"
	}
	edited := base[:off] + block + base[off:]
	if err := e.writeText(ctx, path, edited, crlf); err != nil {
		return "", err
	}
	return "The file " + path + " has been edited. " + snippet(path, edited, k, strings.Count(block, "\n"), e.limit) +
		"Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.", nil
}
