package openai

import (
	"fmt"
	"strings"
	"unicode"
)

// This file applies V4A diffs, the patch format of OpenAI's apply_patch
// tool: a headerless diff of "@@ anchor" sections whose lines start with
// "+" (added), "-" (removed) or " " (context). It is a port of
// applyDiff in @openai/agents-core (src/utils/applyDiff.ts), the
// reference the Agents SDK applies patches with, keeping its matching
// rules (exact, then ignoring trailing whitespace, then ignoring
// surrounding whitespace), its line-ending handling and its error
// messages, so that a patch applies here exactly when it would there.

// diffError is why a diff does not apply, in the reference's words (a
// model trained on them reads them back).
type diffError string

func (e diffError) Error() string { return string(e) }

func diffErrorf(format string, args ...any) error { return diffError(fmt.Sprintf(format, args...)) }

// The applier's bounds. The diff is the model's and the file may be the
// sandbox's, so neither may make the daemon work or hold memory in
// proportion to the product of their sizes: each is split into lines
// (16 bytes a line per copy, beside the text), so both are capped in
// lines, and the matching (a section's context tried at every line from
// the cursor, in three passes; an anchor searched from the file's top
// for every section) draws on a budget of line comparisons, each
// weighted by the bytes it compares. A patch past either fails like a
// patch that does not apply. The reference has neither bound; a patch a
// model writes for a real file uses a small part of each.
const (
	maxPatchLines = 1 << 20
	maxPatchWork  = 1 << 27
)

// errTooMuchWork: the patch exhausted the matching budget.
var errTooMuchWork = diffErrorf("The patch takes too much work to match against the file (over %d line comparisons): "+
	"give each section less context or anchors that occur once, or split the patch.", maxPatchWork)

// workBudget is what is left of maxPatchWork.
type workBudget struct{ left int }

// compare spends a comparison of a and b, eight times dearer when both
// are trimmed first (what that costs, measured); false once the budget
// is gone.
func (w *workBudget) compare(a, b string, trimmed bool) bool {
	cost := 1 + (len(a)+len(b))>>5
	if trimmed {
		cost *= 8
	}
	w.left -= cost
	return w.left >= 0
}

// The markers that end a section or a file's patch.
const (
	endPatch = "*** End Patch"
	endFile  = "*** End of File"
)

var (
	endSectionMarkers  = []string{endPatch, "*** Update File:", "*** Delete File:", "*** Add File:", endFile}
	sectionTerminators = []string{endPatch, "*** Update File:", "*** Delete File:", "*** Add File:"}
)

// applyDiff applies diff to input. With create, diff is an "Add File"
// body, every line of which starts with "+", and input is ignored.
// Otherwise it patches input, keeping its line endings (CRLF when every
// line ends so). It fails when the diff is malformed or its context is
// not in input.
func applyDiff(input, diff string, create bool) (string, error) {
	if n := strings.Count(diff, "\n"); n > maxPatchLines {
		return "", diffErrorf("The diff has %d lines; at most %d are applied.", n, maxPatchLines)
	}
	if n := strings.Count(input, "\n"); n > maxPatchLines {
		return "", diffErrorf("The file has %d lines; apply_patch updates files of at most %d.", n, maxPatchLines)
	}
	lines := normalizeDiffLines(diff)
	if create {
		return parseCreateDiff(lines)
	}
	lineEnding := detectLineEnding(input)
	if lineEnding == "\r\n" {
		input = strings.ReplaceAll(input, "\r\n", "\n")
	}
	chunks, err := parseUpdateDiff(lines, input)
	if err != nil {
		return "", err
	}
	return applyChunks(input, chunks, lineEnding)
}

// detectLineEnding is "\r\n" when every "\n" of s follows a "\r" (and
// there is one), else "\n".
func detectLineEnding(s string) string {
	has := false
	for i := 0; i < len(s); i++ {
		if s[i] != '\n' {
			continue
		}
		has = true
		if i == 0 || s[i-1] != '\r' {
			return "\n"
		}
	}
	if has {
		return "\r\n"
	}
	return "\n"
}

// normalizeDiffLines splits a diff into lines without their endings,
// dropping the empty line after a final newline.
func normalizeDiffLines(diff string) []string {
	lines := strings.Split(diff, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	return lines
}

type diffParser struct {
	lines []string
	index int
	fuzz  int
	work  workBudget
}

func (p *diffParser) done(prefixes []string) bool {
	if p.index >= len(p.lines) {
		return true
	}
	for _, pre := range prefixes {
		if strings.HasPrefix(p.lines[p.index], pre) {
			return true
		}
	}
	return false
}

// readStr consumes the current line if it starts with prefix and
// returns the rest of it; "" otherwise.
func (p *diffParser) readStr(prefix string) string {
	if p.index < len(p.lines) && strings.HasPrefix(p.lines[p.index], prefix) {
		p.index++
		return p.lines[p.index-1][len(prefix):]
	}
	return ""
}

func parseCreateDiff(lines []string) (string, error) {
	p := &diffParser{lines: append(append([]string(nil), lines...), endPatch)}
	var out []string
	for !p.done(sectionTerminators) {
		line := p.lines[p.index]
		p.index++
		if !strings.HasPrefix(line, "+") {
			return "", diffErrorf("Invalid Add File Line: %s", line)
		}
		out = append(out, line[1:])
	}
	return strings.Join(out, "\n"), nil
}

// chunk replaces the lines del at origIndex of the input with ins.
type chunk struct {
	origIndex int
	del, ins  []string
}

func parseUpdateDiff(lines []string, input string) ([]chunk, error) {
	p := &diffParser{lines: append(append([]string(nil), lines...), endPatch), work: workBudget{left: maxPatchWork}}
	inputLines := strings.Split(input, "\n")
	var chunks []chunk
	cursor := 0
	for !p.done(endSectionMarkers) {
		anchors, anchorCount := p.readAnchors()
		if !(anchorCount > 0 || cursor == 0) {
			return nil, diffErrorf("Invalid Line:\n%s", p.lines[p.index])
		}
		requireMatch := anchorCount > 1
		for i, a := range anchors {
			var err error
			if cursor, err = p.advanceToAnchor(a, inputLines, cursor, requireMatch, i > 0); err != nil {
				return nil, err
			}
		}
		sec, err := readSection(p.lines, p.index)
		if err != nil {
			return nil, err
		}
		newIndex, fuzz, err := findContext(inputLines, sec.context, cursor, sec.eof, &p.work)
		if err != nil {
			return nil, err
		}
		if newIndex == -1 {
			text := strings.Join(sec.context, "\n")
			if sec.eof {
				return nil, diffErrorf("Invalid EOF Context %d:\n%s", cursor, text)
			}
			return nil, diffErrorf("Invalid Context %d:\n%s", cursor, text)
		}
		p.fuzz += fuzz
		for _, c := range sec.chunks {
			c.origIndex += newIndex
			chunks = append(chunks, c)
		}
		cursor = newIndex + len(sec.context)
		p.index = sec.end
	}
	return chunks, nil
}

// readAnchors consumes the "@@" and "@@ anchor" lines that open a
// section: the non-blank anchors and how many such lines there were.
func (p *diffParser) readAnchors() (anchors []string, count int) {
	for {
		start := p.index
		a := p.readStr("@@ ")
		consumed := p.index != start
		if !consumed && p.index < len(p.lines) && p.lines[p.index] == "@@" {
			p.index++
			consumed = true
		}
		if !consumed {
			return anchors, count
		}
		count++
		if trimJS(a) != "" {
			anchors = append(anchors, a)
		}
	}
}

// advanceToAnchor moves cursor past the line that equals anchor
// (exactly, else ignoring surrounding whitespace); an anchor already
// passed keeps the cursor, unless forward is set. With requireMatch a
// missing anchor is an error.
func (p *diffParser) advanceToAnchor(anchor string, input []string, cursor int, requireMatch, forward bool) (int, error) {
	found, spent := false, false
	match := func(eq func(string) bool, trimmed bool) {
		if !forward {
			for _, l := range input[:cursor] {
				if !p.work.compare(l, anchor, trimmed) {
					spent = true
					return
				}
				if eq(l) {
					found = true
					return
				}
			}
		}
		for i := cursor; i < len(input); i++ {
			if !p.work.compare(input[i], anchor, trimmed) {
				spent = true
				return
			}
			if eq(input[i]) {
				cursor, found = i+1, true
				return
			}
		}
	}
	match(func(l string) bool { return l == anchor }, false)
	if !found && !spent {
		trimmed := trimJS(anchor)
		before := cursor
		match(func(l string) bool { return trimJS(l) == trimmed }, true)
		if found && cursor != before {
			p.fuzz++
		}
	}
	if spent {
		return cursor, errTooMuchWork
	}
	if requireMatch && !found {
		return cursor, diffErrorf("Invalid Anchor %d:\n%s", cursor, anchor)
	}
	return cursor, nil
}

// section is one parsed section: its old lines (context and removed),
// its changes, where it ends and whether it is anchored at the end of
// the file.
type section struct {
	context []string
	chunks  []chunk
	end     int
	eof     bool
}

func readSection(lines []string, start int) (section, error) {
	var s section
	var del, ins []string
	mode := "keep"
	index := start
	flush := func() {
		if len(ins) > 0 || len(del) > 0 {
			s.chunks = append(s.chunks, chunk{origIndex: len(s.context) - len(del), del: del, ins: ins})
			del, ins = nil, nil
		}
	}
	for index < len(lines) {
		raw := lines[index]
		if strings.HasPrefix(raw, "@@") || strings.HasPrefix(raw, endPatch) || strings.HasPrefix(raw, "*** Update File:") ||
			strings.HasPrefix(raw, "*** Delete File:") || strings.HasPrefix(raw, "*** Add File:") || strings.HasPrefix(raw, endFile) {
			break
		}
		if raw == "***" {
			break
		}
		if strings.HasPrefix(raw, "***") {
			return s, diffErrorf("Invalid Line: %s", raw)
		}
		index++
		last := mode
		line := raw
		if line == "" {
			line = " "
		}
		switch line[0] {
		case '+':
			mode = "add"
		case '-':
			mode = "delete"
		case ' ':
			mode = "keep"
		default:
			return s, diffErrorf("Invalid Line: %s", line)
		}
		line = line[1:]
		if mode == "keep" && last != mode {
			flush()
		}
		switch mode {
		case "delete":
			del = append(del, line)
			s.context = append(s.context, line)
		case "add":
			ins = append(ins, line)
		default:
			s.context = append(s.context, line)
		}
	}
	flush()
	if index < len(lines) && lines[index] == endFile {
		s.end, s.eof = index+1, true
		return s, nil
	}
	if index == start {
		next := ""
		if index < len(lines) {
			next = lines[index]
		}
		return s, diffErrorf("Nothing in this section - index=%d %s", index, next)
	}
	s.end = index
	return s, nil
}

// findContext finds context in lines from start: at the end of the
// file first when eof (a match elsewhere then counts as very fuzzy).
func findContext(lines, context []string, start int, eof bool, w *workBudget) (int, int, error) {
	if eof {
		search := lines
		if len(lines) > 1 && lines[len(lines)-1] == "" {
			search = lines[:len(lines)-1]
		}
		if i, fuzz, err := findContextCore(search, context, max(0, len(search)-len(context)), w); i != -1 || err != nil {
			return i, fuzz, err
		}
		i, fuzz, err := findContextCore(search, context, min(start, len(search)), w)
		return i, fuzz + 10000, err
	}
	return findContextCore(lines, context, start, w)
}

func findContextCore(lines, context []string, start int, w *workBudget) (int, int, error) {
	if len(context) == 0 {
		return start, 0, nil
	}
	passes := []struct {
		norm func(string) string
		fuzz int
	}{
		{func(s string) string { return s }, 0},
		{func(s string) string { return strings.TrimRightFunc(s, jsSpace) }, 1},
		{trimJS, 100},
	}
	for _, pass := range passes {
		for i := start; i < len(lines); i++ {
			eq, ok := equalsSlice(lines, context, i, pass.norm, pass.fuzz > 0, w)
			if !ok {
				return -1, 0, errTooMuchWork
			}
			if eq {
				return i, pass.fuzz, nil
			}
		}
	}
	return -1, 0, nil
}

// equalsSlice reports whether target is at source[start:] under norm;
// ok is false once w is spent.
func equalsSlice(source, target []string, start int, norm func(string) string, trimmed bool, w *workBudget) (eq, ok bool) {
	if start+len(target) > len(source) {
		return false, true
	}
	for i, t := range target {
		if !w.compare(source[start+i], t, trimmed) {
			return false, false
		}
		if norm(source[start+i]) != norm(t) {
			return false, true
		}
	}
	return true, true
}

func applyChunks(input string, chunks []chunk, lineEnding string) (string, error) {
	orig := strings.Split(input, "\n")
	var dest []string
	at := 0
	for _, c := range chunks {
		if c.origIndex > len(orig) {
			return "", diffErrorf("applyDiff: chunk.origIndex %d > input length %d", c.origIndex, len(orig))
		}
		if at > c.origIndex {
			return "", diffErrorf("applyDiff: overlapping chunk at %d (cursor %d)", c.origIndex, at)
		}
		dest = append(dest, orig[at:c.origIndex]...)
		dest = append(dest, c.ins...)
		at = c.origIndex + len(c.del)
	}
	if at < len(orig) {
		dest = append(dest, orig[at:]...)
	}
	return strings.Join(dest, lineEnding), nil
}

// jsSpace is JavaScript's white space (what String.prototype.trim
// removes): Unicode's, with U+FEFF and without U+0085.
func jsSpace(r rune) bool { return r == '\uFEFF' || r != '\u0085' && unicode.IsSpace(r) }

func trimJS(s string) string { return strings.TrimFunc(s, jsSpace) }
