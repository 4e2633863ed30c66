// Package dockerfile reads a Dockerfile as text: its instructions grouped by
// build stage, with the ARG defaults declared before the first FROM
// substituted into FROM lines. It is for checks that need no Docker engine;
// it does not evaluate RUN steps and knows nothing of heredocs.
package dockerfile

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Instruction is one instruction, continuation lines joined.
type Instruction struct {
	Cmd  string // upper case: FROM, RUN, ARG, ENV, USER, COPY, …
	Args string // the rest of the instruction, trimmed
	Line int    // 1-based line of its first line
}

// Stage is one FROM and the instructions that follow it.
type Stage struct {
	Name         string // the AS name, "" when unnamed
	From         string // the image or earlier stage, global ARGs expanded
	Instructions []Instruction
}

// File is a parsed Dockerfile.
type File struct {
	// GlobalArgs are the ARG defaults declared before the first FROM.
	GlobalArgs map[string]string
	// Preamble are the instructions before the first FROM (ARG only).
	Preamble []Instruction
	Stages   []Stage
}

// Parse reads src. Comment lines (also inside a continued instruction) and
// blank lines are skipped; a trailing backslash continues a line.
func Parse(src string) (*File, error) {
	insts, err := instructions(src)
	if err != nil {
		return nil, err
	}
	f := &File{GlobalArgs: map[string]string{}}
	for _, in := range insts {
		switch {
		case in.Cmd == "FROM":
			st, err := f.stage(in)
			if err != nil {
				return nil, err
			}
			f.Stages = append(f.Stages, st)
		case len(f.Stages) == 0:
			if in.Cmd != "ARG" {
				return nil, fmt.Errorf("line %d: %s before the first FROM", in.Line, in.Cmd)
			}
			name, def, _ := ParseArg(in.Args)
			f.GlobalArgs[name] = def
			f.Preamble = append(f.Preamble, in)
		default:
			last := &f.Stages[len(f.Stages)-1]
			last.Instructions = append(last.Instructions, in)
		}
	}
	if len(f.Stages) == 0 {
		return nil, errors.New("no FROM")
	}
	return f, nil
}

var cmdRE = regexp.MustCompile(`^([A-Za-z]+)(\s+|$)`)

func instructions(src string) ([]Instruction, error) {
	var out []Instruction
	var cur *Instruction
	for i, raw := range strings.Split(src, "\n") {
		line := strings.TrimRight(raw, " \t\r")
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		cont := strings.HasSuffix(line, "\\")
		if cont {
			line = strings.TrimSuffix(line, "\\")
		}
		if cur == nil {
			m := cmdRE.FindStringSubmatch(trimmed)
			if m == nil {
				return nil, fmt.Errorf("line %d: not an instruction: %q", i+1, trimmed)
			}
			cur = &Instruction{Cmd: strings.ToUpper(m[1]), Line: i + 1}
			line = strings.TrimSpace(line)[len(m[1]):]
		}
		cur.Args += line
		if !cont {
			cur.Args = strings.TrimSpace(cur.Args)
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: the file ends inside a continued instruction", cur.Line)
	}
	return out, nil
}

func (f *File) stage(in Instruction) (Stage, error) {
	fields := strings.Fields(in.Args)
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		fields = fields[1:]
	}
	var st Stage
	switch {
	case len(fields) == 1:
	case len(fields) == 3 && strings.EqualFold(fields[1], "AS"):
		st.Name = fields[2]
	default:
		return st, fmt.Errorf("line %d: FROM %q: want IMAGE [AS NAME]", in.Line, in.Args)
	}
	from, err := Expand(fields[0], f.GlobalArgs)
	if err != nil {
		return st, fmt.Errorf("line %d: %w", in.Line, err)
	}
	st.From = from
	return st, nil
}

var varRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// Expand substitutes $NAME and ${NAME} from vars; an unknown name is an
// error (a FROM must not depend on a build argument without a default).
func Expand(s string, vars map[string]string) (string, error) {
	var missing []string
	out := varRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := varRE.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		v, ok := vars[name]
		if !ok || v == "" {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("%q: no default for %s", s, strings.Join(missing, ", "))
	}
	return out, nil
}

// ParseArg splits `NAME[=default]`.
func ParseArg(args string) (name, def string, hasDefault bool) {
	name, def, hasDefault = strings.Cut(strings.TrimSpace(args), "=")
	return name, unquote(def), hasDefault
}

// ParseEnv splits an ENV instruction's arguments into pairs: the
// `K=V K2="V 2"` form, or the legacy `K V` form.
func ParseEnv(args string) ([][2]string, error) {
	args = strings.TrimSpace(args)
	first, rest, _ := strings.Cut(args, " ")
	if !strings.Contains(first, "=") {
		if first == "" {
			return nil, errors.New("ENV without a name")
		}
		return [][2]string{{first, strings.TrimSpace(rest)}}, nil
	}
	var out [][2]string
	for _, w := range words(args) {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("ENV %q: want NAME=value", w)
		}
		out = append(out, [2]string{k, unquote(v)})
	}
	return out, nil
}

// words splits on unquoted whitespace, keeping quotes.
func words(s string) []string {
	var out []string
	var b strings.Builder
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			b.WriteRune(r)
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
			b.WriteRune(r)
		case r == ' ' || r == '\t':
			if b.Len() > 0 {
				out = append(out, b.String())
				b.Reset()
			}
		default:
			b.WriteRune(r)
		}
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// Final is the last stage: the image that is shipped.
func (f *File) Final() *Stage { return &f.Stages[len(f.Stages)-1] }

// StageNamed returns the stage called name, nil if none.
func (f *File) StageNamed(name string) *Stage {
	for i := range f.Stages {
		if f.Stages[i].Name == name {
			return &f.Stages[i]
		}
	}
	return nil
}

// Args are the stage's ARG defaults, global ones it redeclares included.
func (s *Stage) Args(global map[string]string) map[string]string {
	out := map[string]string{}
	for _, in := range s.Each("ARG") {
		name, def, has := ParseArg(in.Args)
		if !has {
			def = global[name]
		}
		out[name] = def
	}
	return out
}

// Each returns the stage's instructions of one kind, in order.
func (s *Stage) Each(cmd string) []Instruction {
	var out []Instruction
	for _, in := range s.Instructions {
		if in.Cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// User is the stage's last USER, "" when it sets none (root).
func (s *Stage) User() string {
	u := s.Each("USER")
	if len(u) == 0 {
		return ""
	}
	return u[len(u)-1].Args
}

// Ref is an image reference: name[:tag][@digest].
type Ref struct {
	Name, Tag, Digest string
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ParseRef splits an image reference. A digest, when present, must be a
// well-formed sha256 digest.
func ParseRef(s string) (Ref, error) {
	var r Ref
	rest, digest, hasDigest := strings.Cut(s, "@")
	if hasDigest {
		if !digestRE.MatchString(digest) {
			return r, fmt.Errorf("image %q: digest is not sha256:<64 hex>", s)
		}
		r.Digest = digest
	}
	// A tag follows the last ':' after the last '/' (a registry may have a port).
	slash := strings.LastIndex(rest, "/")
	if i := strings.LastIndex(rest, ":"); i > slash {
		r.Name, r.Tag = rest[:i], rest[i+1:]
	} else {
		r.Name = rest
	}
	if r.Name == "" {
		return r, fmt.Errorf("image %q: no name", s)
	}
	return r, nil
}
