package models

import (
	"fmt"
	"regexp"
	"strconv"
	"unicode/utf8"
)

// StringOptions constrain the string model.
type StringOptions struct {
	MinLength, MaxLength int    // in characters; 0: no bound
	Pattern              string // RE2, anchored to the whole value
}

// primitive validates values in text form: what an HTTP path parameter or a
// plain-text body holds.
type primitive struct {
	model   string
	str     StringOptions
	pattern *regexp.Regexp
}

func newPrimitive(model string, o StringOptions) (*primitive, error) {
	p := &primitive{model: model, str: o}
	switch model {
	case "string":
		if o.MinLength < 0 || o.MaxLength < 0 || (o.MaxLength > 0 && o.MinLength > o.MaxLength) {
			return nil, fmt.Errorf("model string: bad length bounds %d..%d", o.MinLength, o.MaxLength)
		}
		if o.Pattern != "" {
			re, err := regexp.Compile(`^(?:` + o.Pattern + `)$`)
			if err != nil {
				return nil, fmt.Errorf("model string: pattern: %w", err)
			}
			p.pattern = re
		}
	case "int32", "int64", "float", "double", "boolean", "bytes":
		if o != (StringOptions{}) {
			return nil, fmt.Errorf("model %s: length and pattern apply to strings only", model)
		}
	case "":
		return nil, fmt.Errorf("no model")
	default:
		return nil, fmt.Errorf("unknown model %q (want json, avro, protobuf, string, int32, int64, float, double, boolean or bytes)", model)
	}
	return p, nil
}

func (p *primitive) validate(v []byte) error {
	var err error
	switch p.model {
	case "bytes":
		return nil
	case "string":
		return p.validateString(v)
	case "int32":
		_, err = strconv.ParseInt(string(v), 10, 32)
	case "int64":
		_, err = strconv.ParseInt(string(v), 10, 64)
	case "float":
		_, err = strconv.ParseFloat(string(v), 32)
	case "double":
		_, err = strconv.ParseFloat(string(v), 64)
	case "boolean":
		// JSON's spelling only; strconv.ParseBool also takes 1, t, True….
		if s := string(v); s != "true" && s != "false" {
			err = strconv.ErrSyntax
		}
	}
	if err != nil {
		return &Error{Kind: KindInvalid, Subject: p.model, Violations: []Violation{{Pointer: "#", Detail: "not a " + p.model}}, Err: err}
	}
	return nil
}

func (p *primitive) validateString(v []byte) error {
	e := &Error{Kind: KindInvalid, Subject: p.model}
	if !utf8.Valid(v) {
		e.Kind = KindParse
		e.addViolation(Violation{Pointer: "#", Detail: "not UTF-8"})
		return e
	}
	n := utf8.RuneCount(v)
	if n < p.str.MinLength {
		e.addViolation(Violation{Pointer: "#", Detail: fmt.Sprintf("shorter than %d characters", p.str.MinLength), Keyword: "min-length"})
	}
	if p.str.MaxLength > 0 && n > p.str.MaxLength {
		e.addViolation(Violation{Pointer: "#", Detail: fmt.Sprintf("longer than %d characters", p.str.MaxLength), Keyword: "max-length"})
	}
	if p.pattern != nil && !p.pattern.Match(v) {
		e.addViolation(Violation{Pointer: "#", Detail: "does not match the pattern", Keyword: "pattern"})
	}
	if len(e.Violations) > 0 {
		return e
	}
	return nil
}
