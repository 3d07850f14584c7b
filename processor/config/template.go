package config

import (
	"fmt"
	"regexp"
	"strings"
)

// refSet is the set of per-request references a field accepts (see Parse).
type refSet uint8

const (
	allowParams refSet = 1 << iota
	allowIdempotencyKey
	allowCorrelationID
	allowGuardIdentity
	inGRPCRoute // not a reference: marks gRPC route fields, for messages
)

// refEnv and refFile are load-time references; they never reach a Template.
const (
	refEnv  RefKind = -1
	refFile RefKind = -2
)

var (
	identRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	guardRefRe = regexp.MustCompile(`^guarded\['([^']*)'\]\.identity$`)
)

// rawRef is one `${...}` of a string as written, before load-time resolution.
type rawRef struct {
	Kind RefKind
	Name string // parameter, guard, environment variable or file path
	Text string // the reference as written, e.g. ${params.id}
}

// rawPart is a literal run (Ref == nil) or a reference.
type rawPart struct {
	Literal string
	Ref     *rawRef
}

// lexTemplate splits s into literal runs and `${...}` references. A `$` not
// followed by `{` is literal.
func lexTemplate(s string) ([]rawPart, error) {
	var parts []rawPart
	lit := strings.Builder{}
	for i := 0; i < len(s); {
		j := strings.Index(s[i:], "${")
		if j < 0 {
			lit.WriteString(s[i:])
			break
		}
		lit.WriteString(s[i : i+j])
		start := i + j
		end := strings.IndexByte(s[start:], '}')
		if end < 0 {
			return nil, fmt.Errorf("unterminated %q in %q: close the reference with \"}\"", "${", s)
		}
		text := s[start : start+end+1]
		ref, err := parseRef(text)
		if err != nil {
			return nil, err
		}
		if lit.Len() > 0 {
			parts = append(parts, rawPart{Literal: lit.String()})
			lit.Reset()
		}
		parts = append(parts, rawPart{Ref: ref})
		i = start + end + 1
	}
	if lit.Len() > 0 {
		parts = append(parts, rawPart{Literal: lit.String()})
	}
	return parts, nil
}

const refHelp = "use ${params.<name>}, ${idempotencyKey}, ${correlationId}, ${guarded['<guard>'].identity}, ${env:<NAME>} or ${file:<path>}"

func parseRef(text string) (*rawRef, error) {
	expr := text[2 : len(text)-1]
	switch {
	case expr == "idempotencyKey":
		return &rawRef{Kind: RefIdempotencyKey, Text: text}, nil
	case expr == "correlationId":
		return &rawRef{Kind: RefCorrelationID, Text: text}, nil
	case strings.HasPrefix(expr, "params."):
		name := strings.TrimPrefix(expr, "params.")
		if !identRe.MatchString(name) {
			return nil, fmt.Errorf("bad parameter name in %s: a name is letters, digits and '_', not starting with a digit", text)
		}
		return &rawRef{Kind: RefParam, Name: name, Text: text}, nil
	case strings.HasPrefix(expr, "env:"):
		name := strings.TrimPrefix(expr, "env:")
		if !identRe.MatchString(name) {
			return nil, fmt.Errorf("bad environment variable name in %s: a name is letters, digits and '_', not starting with a digit", text)
		}
		return &rawRef{Kind: refEnv, Name: name, Text: text}, nil
	case strings.HasPrefix(expr, "file:"):
		name := strings.TrimPrefix(expr, "file:")
		if name == "" {
			return nil, fmt.Errorf("empty path in %s: write ${file:<path>}", text)
		}
		return &rawRef{Kind: refFile, Name: name, Text: text}, nil
	case strings.HasPrefix(expr, "guarded"):
		m := guardRefRe.FindStringSubmatch(expr)
		if m == nil || m[1] == "" {
			return nil, fmt.Errorf("malformed reference %s: write ${guarded['<guard>'].identity}", text)
		}
		return &rawRef{Kind: RefGuardIdentity, Name: m[1], Text: text}, nil
	}
	return nil, fmt.Errorf("unknown reference %s: %s", text, refHelp)
}

// refNames names the per-request references of set, for messages.
func (s refSet) names() string {
	var out []string
	if s&allowParams != 0 {
		out = append(out, "${params.<name>}")
	}
	if s&allowIdempotencyKey != 0 {
		out = append(out, "${idempotencyKey}")
	}
	if s&allowCorrelationID != 0 {
		out = append(out, "${correlationId}")
	}
	if s&allowGuardIdentity != 0 {
		out = append(out, "${guarded['<guard>'].identity}")
	}
	return strings.Join(out, ", ")
}

func (s refSet) allows(k RefKind) bool {
	switch k {
	case RefParam:
		return s&allowParams != 0
	case RefIdempotencyKey:
		return s&allowIdempotencyKey != 0
	case RefCorrelationID:
		return s&allowCorrelationID != 0
	case RefGuardIdentity:
		return s&allowGuardIdentity != 0
	}
	return true
}

// Refs returns the references of the template, in order.
func (t Template) Refs() []TemplatePart {
	var out []TemplatePart
	for _, p := range t.Parts {
		if p.Ref != RefNone {
			out = append(out, p)
		}
	}
	return out
}

// String renders the template with its references written as in the file.
func (t Template) String() string {
	return t.Expand(func(p TemplatePart) string { return p.ref() })
}

func (p TemplatePart) ref() string {
	switch p.Ref {
	case RefParam:
		return "${params." + p.Name + "}"
	case RefIdempotencyKey:
		return "${idempotencyKey}"
	case RefCorrelationID:
		return "${correlationId}"
	case RefGuardIdentity:
		return "${guarded['" + p.Name + "'].identity}"
	}
	return p.Literal
}

// HasRef reports whether the template holds a reference of kind k.
func (t Template) HasRef(k RefKind) bool {
	for _, p := range t.Parts {
		if p.Ref == k {
			return true
		}
	}
	return false
}
