package airfile

import (
	"strings"
)

// splitWords splits s at blanks that are outside quotes and not escaped
// with a backslash. Quotes and backslashes stay in the words.
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			cur.WriteByte(c)
			if c == '\\' && quote == '"' && i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			} else if c == quote {
				quote = 0
			}
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			inWord = true
			cur.WriteByte(c)
			switch c {
			case '\\':
				if i+1 < len(s) {
					i++
					cur.WriteByte(s[i])
				}
			case '"', '\'':
				quote = c
			}
		}
	}
	if quote != 0 {
		return nil, problemf("unterminated %c quote", quote)
	}
	if inWord {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, problemf("no arguments")
	}
	return words, nil
}

// maxExpandBytes caps the result of Expand (a value can reference
// another many times).
const maxExpandBytes = 1 << 20

// Expand processes a word the way Dockerfiles do for ENV, WORKDIR and
// COPY/ADD destinations: 'single quotes' keep their content literally,
// "double quotes" group text in which \" \\ and \$ are escapes and
// variables are replaced, a backslash outside quotes escapes the next
// character, and $NAME, ${NAME}, ${NAME:-default} (default when unset or
// empty) and ${NAME:+alternative} (alternative when set and not empty)
// are replaced using lookup. Unset variables are empty. lookup may be nil
// (every variable unset).
func Expand(word string, lookup func(name string) (string, bool)) (string, error) {
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	x := expander{s: word, lookup: lookup}
	out, err := x.run(false)
	if err != nil {
		return "", err
	}
	if len(out) > maxExpandBytes {
		return "", problemf("expands to more than %d bytes", maxExpandBytes)
	}
	return out, nil
}

// expander is the state of one Expand.
type expander struct {
	s      string
	i      int
	lookup func(string) (string, bool)
	depth  int
}

// run processes text until the end of input or, when inBrace, an
// unquoted '}' (which it does not consume).
func (x *expander) run(inBrace bool) (string, error) {
	var b strings.Builder
	for x.i < len(x.s) {
		if b.Len() > maxExpandBytes {
			return "", problemf("expands to more than %d bytes", maxExpandBytes)
		}
		c := x.s[x.i]
		switch c {
		case '}':
			if inBrace {
				return b.String(), nil
			}
			b.WriteByte(c) // a '}' outside ${...} is literal
			x.i++
		case '\\':
			x.i++
			if x.i < len(x.s) {
				b.WriteByte(x.s[x.i])
				x.i++
			} else {
				b.WriteByte('\\')
			}
		case '\'':
			end := strings.IndexByte(x.s[x.i+1:], '\'')
			if end < 0 {
				return "", problemf("unterminated ' quote")
			}
			b.WriteString(x.s[x.i+1 : x.i+1+end])
			x.i += end + 2
		case '"':
			x.i++
			if err := x.double(&b); err != nil {
				return "", err
			}
		case '$':
			v, err := x.variable()
			if err != nil {
				return "", err
			}
			b.WriteString(v)
		default:
			b.WriteByte(c)
			x.i++
		}
	}
	if inBrace {
		return "", problemf("missing } in ${...}")
	}
	return b.String(), nil
}

// double processes the inside of double quotes, consuming the closing one.
func (x *expander) double(b *strings.Builder) error {
	for x.i < len(x.s) {
		c := x.s[x.i]
		switch c {
		case '"':
			x.i++
			return nil
		case '\\':
			if x.i+1 < len(x.s) && strings.IndexByte(`"\$`, x.s[x.i+1]) >= 0 {
				b.WriteByte(x.s[x.i+1])
				x.i += 2
				continue
			}
			b.WriteByte(c)
			x.i++
		case '$':
			v, err := x.variable()
			if err != nil {
				return err
			}
			b.WriteString(v)
		default:
			b.WriteByte(c)
			x.i++
		}
	}
	return problemf("unterminated \" quote")
}

// variable expands the reference at x.s[x.i] == '$'.
func (x *expander) variable() (string, error) {
	x.i++ // '$'
	if x.i < len(x.s) && x.s[x.i] == '{' {
		x.i++
		name := x.name()
		if name == "" {
			return "", problemf("bad substitution: ${ needs a variable name")
		}
		val, set := x.lookup(name)
		if x.i >= len(x.s) {
			return "", problemf("missing } in ${%s", clip(name))
		}
		if x.s[x.i] == '}' {
			x.i++
			return val, nil
		}
		if x.i+1 >= len(x.s) || x.s[x.i] != ':' || (x.s[x.i+1] != '-' && x.s[x.i+1] != '+') {
			return "", problemf("bad substitution in ${%s...}: only ${NAME}, ${NAME:-default} and ${NAME:+alternative} are supported", clip(name))
		}
		op := x.s[x.i+1]
		x.i += 2
		x.depth++
		if x.depth > 16 {
			return "", problemf("substitutions nested too deeply")
		}
		word, err := x.run(true)
		x.depth--
		if err != nil {
			return "", err
		}
		x.i++ // '}'
		set = set && val != ""
		switch {
		case op == '-' && !set:
			return word, nil
		case op == '+' && set:
			return word, nil
		case op == '+':
			return "", nil
		}
		return val, nil
	}
	name := x.name()
	if name == "" {
		return "$", nil
	}
	val, _ := x.lookup(name)
	return val, nil
}

// name consumes a variable name ([A-Za-z_][A-Za-z0-9_]*) at x.i.
func (x *expander) name() string {
	start := x.i
	for x.i < len(x.s) {
		c := x.s[x.i]
		if c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (x.i > start && c >= '0' && c <= '9') {
			x.i++
			continue
		}
		break
	}
	return x.s[start:x.i]
}
