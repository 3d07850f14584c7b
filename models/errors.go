package models

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Kind says what went wrong with a value, and so how the processor answers.
type Kind int

const (
	// KindParse: the value does not parse as its format (not JSON, bad
	// framing, truncated binary, an unknown schema id in a framed value):
	// 400, gRPC INVALID_ARGUMENT.
	KindParse Kind = iota + 1
	// KindInvalid: the value parses but violates its schema: 422, gRPC
	// INVALID_ARGUMENT.
	KindInvalid
	// KindUnavailable: the schema the value needs cannot be had now (the
	// registry is unreachable, slow, or lacks the configured subject): 503
	// with retry-after, gRPC UNAVAILABLE.
	KindUnavailable
)

func (k Kind) String() string {
	switch k {
	case KindParse:
		return "parse"
	case KindInvalid:
		return "invalid"
	case KindUnavailable:
		return "unavailable"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Status is the HTTP status a value refused for this kind is answered with.
func (k Kind) Status() int {
	switch k {
	case KindParse:
		return http.StatusBadRequest
	case KindInvalid:
		return http.StatusUnprocessableEntity
	case KindUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// MaxViolations bounds the violations an Error keeps: a client learns enough
// to fix its request without the answer growing with the body.
const MaxViolations = 20

// Violation is one reason a value was refused, in RFC 9457's `errors` shape.
// It never echoes the value.
type Violation struct {
	// Pointer is an RFC 6901 JSON pointer into the value as a URI fragment
	// ("#/items/0/qty"; "#" is the whole value).
	Pointer string `json:"pointer"`
	// Detail says what is wrong, on one line.
	Detail string `json:"detail"`
	// Keyword is where in the schema the rule is, when the schema language
	// says (JSON Schema keyword location).
	Keyword string `json:"keyword,omitempty"`
}

// Error is why a model refused a value. Use errors.As to get it from what
// Encode and Decode return.
type Error struct {
	Kind Kind
	// Subject names the schema (catalog/subject or catalog/id), for the
	// problem's detail and the log.
	Subject string
	// Violations are at most MaxViolations reasons; Truncated says more were
	// found.
	Violations []Violation
	Truncated  bool
	// Err is the underlying cause (the registry's error for
	// KindUnavailable), for the log; it may carry values, so it is not
	// shown to clients.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.String())
	if e.Subject != "" {
		b.WriteString(" (schema ")
		b.WriteString(e.Subject)
		b.WriteString(")")
	}
	for i, v := range e.Violations {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.Violations)-i)
			break
		}
		fmt.Fprintf(&b, "; %s: %s", v.Pointer, v.Detail)
	}
	if e.Err != nil && len(e.Violations) == 0 {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// ProblemTypeInvalid is the RFC 9457 problem type of schema violations.
const ProblemTypeInvalid = "https://github.com/kafka-ext-proc/kafka-ext-proc/blob/main/models/README.md#violations"

// Problem is the RFC 9457 problem details object for the error, with the
// violations as the `errors` extension member (RFC 9457 §3's own example).
type Problem struct {
	Type   string      `json:"type"`
	Title  string      `json:"title"`
	Status int         `json:"status"`
	Detail string      `json:"detail,omitempty"`
	Errors []Violation `json:"errors,omitempty"`
}

// Problem renders the error for a client: detail is one line naming the
// schema, never a value; the registry's own error stays in the log.
func (e *Error) Problem() Problem {
	p := Problem{Type: "about:blank", Status: e.Kind.Status(), Title: http.StatusText(e.Kind.Status())}
	switch e.Kind {
	case KindInvalid:
		p.Type = ProblemTypeInvalid
		n := fmt.Sprint(len(e.Violations))
		if e.Truncated {
			n = "more than " + n
		}
		p.Detail = fmt.Sprintf("%s violations of schema %s", n, e.Subject)
		if len(e.Violations) == 1 {
			p.Detail = "1 violation of schema " + e.Subject
		}
		p.Errors = e.Violations
	case KindParse:
		p.Detail = "the value does not parse"
		if len(e.Violations) > 0 {
			p.Detail += ": " + e.Violations[0].Detail
		}
	case KindUnavailable:
		p.Detail = "schema " + e.Subject + " is unavailable; retry later"
	}
	return p
}

// addViolation appends v unless MaxViolations are already kept.
func (e *Error) addViolation(v Violation) {
	if len(e.Violations) >= MaxViolations {
		e.Truncated = true
		return
	}
	e.Violations = append(e.Violations, v)
}

func parseError(subject, pointer, detail string, err error) *Error {
	return &Error{Kind: KindParse, Subject: subject, Violations: []Violation{{Pointer: pointer, Detail: detail}}, Err: err}
}

func invalidError(subject, pointer, detail string, err error) *Error {
	return &Error{Kind: KindInvalid, Subject: subject, Violations: []Violation{{Pointer: pointer, Detail: detail}}, Err: err}
}

// KindOf returns the kind of a model error, or 0 for other errors.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// SchemaError is a schema that does not compile: a configuration error.
// Line and Column (1-based) are set when the schema language reports a
// position in the schema text.
type SchemaError struct {
	Subject      string // catalog/subject or catalog/id
	Line, Column int
	Err          error
}

func (e *SchemaError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("schema %s:%d:%d: %v", e.Subject, e.Line, e.Column, e.Err)
	}
	return fmt.Sprintf("schema %s: %v", e.Subject, e.Err)
}

func (e *SchemaError) Unwrap() error { return e.Err }

// lineCol turns a byte offset in text into a 1-based line and column.
func lineCol(text string, offset int64) (line, col int) {
	if offset < 0 || offset >= int64(len(text)) {
		return 0, 0
	}
	before := text[:offset]
	line = strings.Count(before, "\n") + 1
	col = int(offset) - strings.LastIndexByte(before, '\n')
	return line, col
}

// pointerEscaper escapes a JSON pointer token (RFC 6901 §3).
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
