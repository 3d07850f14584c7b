package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
)

// Result is what one scenario measured: the run's parameters, its
// measurements and the ratios it exists for, each under one name, the
// same in the text report, in the -json object and in medians.jq.
type Result struct {
	Scenario string
	Split    bool // the servers ran in a child process
	Params   []Field
	Figures  []Field
	Ratios   []Ratio
	// Targets are the bounds BENCHMARKS.md holds some figures and ratios
	// to ("≥ 0.6", "≤ 500 ms"), by name.
	Targets map[string]string
}

// Field is one named value: a number, a string, a []float64 or a map from
// names to numbers.
type Field struct {
	Name  string
	Value any
}

// Ratio is a ratio of two figures taken in the same run, and what it
// divides, for the reader of the text report.
type Ratio struct {
	Name  string
	Value float64
	Of    string
}

func newResult(scenario string, split bool) *Result {
	return &Result{Scenario: scenario, Split: split}
}

// param adds a parameter of the run.
func (r *Result) param(name string, v any) { r.Params = append(r.Params, Field{name, v}) }

// figure adds one measurement.
func (r *Result) figure(name string, v any) { r.Figures = append(r.Figures, Field{name, v}) }

// figures adds the fields of a measurement struct, named prefix_ and their
// JSON names (a nested struct's fields prefixed again); a nil pointer and
// an omitempty zero are left out, as not measured in this run.
func (r *Result) figures(prefix string, v any) {
	r.Figures = appendFields(r.Figures, prefix, reflect.ValueOf(v))
}

// ratio adds a ratio: of says what it divides, target is "" or its bound.
func (r *Result) ratio(name string, v float64, of, target string) {
	r.Ratios = append(r.Ratios, Ratio{name, v, of})
	r.target(name, target)
}

// target sets the bound of the figure or ratio name ("" for none).
func (r *Result) target(name, bound string) {
	if bound == "" {
		return
	}
	if r.Targets == nil {
		r.Targets = map[string]string{}
	}
	r.Targets[name] = bound
}

func appendFields(out []Field, prefix string, v reflect.Value) []Field {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return out
		}
		v = v.Elem()
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		fv := v.Field(i)
		if opts == "omitempty" && fv.IsZero() {
			continue
		}
		if prefix != "" {
			name = prefix + "_" + name
		}
		if k := fv.Kind(); k == reflect.Struct || k == reflect.Pointer && fv.Type().Elem().Kind() == reflect.Struct {
			out = appendFields(out, name, fv)
			continue
		}
		if fv.Kind() == reflect.Pointer {
			if fv.IsNil() {
				continue
			}
			fv = fv.Elem()
		}
		out = append(out, Field{name, fv.Interface()})
	}
	return out
}

// fields is every named value of r in report order: parameters, figures,
// ratios.
func (r *Result) fields() []Field {
	out := slices.Concat(r.Params, r.Figures)
	for _, q := range r.Ratios {
		out = append(out, Field{q.Name, q.Value})
	}
	return out
}

// check refuses two values of one name, and a target of a value r does
// not have: either would make the -json object say something else than
// the text.
func (r *Result) check() error {
	seen := map[string]bool{"scenario": true, "split": true, "targets": true}
	for _, f := range r.fields() {
		if seen[f.Name] {
			return fmt.Errorf("%s: two values named %q", r.Scenario, f.Name)
		}
		seen[f.Name] = true
	}
	for name := range r.Targets {
		if !seen[name] {
			return fmt.Errorf("%s: a target for %q, which it does not measure", r.Scenario, name)
		}
	}
	return nil
}

// MarshalJSON writes r as one flat object: scenario, split, then every
// parameter, figure and ratio by its name, and the targets by name.
func (r *Result) MarshalJSON() ([]byte, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"scenario":%q,"split":%t`, r.Scenario, r.Split)
	for _, f := range r.fields() {
		v, err := json.Marshal(finite(f.Value))
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", r.Scenario, f.Name, err)
		}
		fmt.Fprintf(&b, ",%q:%s", f.Name, v)
	}
	if len(r.Targets) > 0 {
		v, err := json.Marshal(r.Targets)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, `,"targets":%s`, v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// finite maps a float that JSON cannot carry (a ratio over a figure this
// platform could not measure) to null.
func finite(v any) any {
	if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		return nil
	}
	return v
}

// report writes r as one line of JSON or as text.
func report(w io.Writer, asJSON bool, r *Result) error {
	if asJSON {
		b, err := r.MarshalJSON()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	if err := r.check(); err != nil {
		return err
	}
	_, err := io.WriteString(w, r.text())
	return err
}

// text is the human-readable report: a line of parameters, a line per
// figure, then a line per ratio with what it divides and its target.
func (r *Result) text() string {
	var b strings.Builder
	where := "in one process"
	if r.Split {
		where = "servers in a child process"
	}
	fmt.Fprintf(&b, "%s (%s)", r.Scenario, where)
	for i, p := range r.Params {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s %s", sep, p.Name, formatValue(p.Value))
	}
	b.WriteString("\n")
	width := 0
	for _, f := range r.fields() {
		width = max(width, len(f.Name))
	}
	for _, f := range r.Figures {
		fmt.Fprintf(&b, "  %-*s  %s%s\n", width, f.Name, formatValue(f.Value), r.targetNote(f.Name))
	}
	for _, q := range r.Ratios {
		fmt.Fprintf(&b, "  %-*s  %.2f ×  %s%s\n", width, q.Name, q.Value, q.Of, r.targetNote(q.Name))
	}
	return b.String()
}

func (r *Result) targetNote(name string) string {
	if t, ok := r.Targets[name]; ok {
		return " (target " + t + ")"
	}
	return ""
}

// formatValue prints a figure with the digits that mean something.
func formatValue(v any) string {
	switch x := v.(type) {
	case float64:
		return formatFloat(x)
	case []float64:
		parts := make([]string, len(x))
		for i, f := range x {
			parts[i] = formatFloat(f)
		}
		return strings.Join(parts, " / ")
	case map[string]float64:
		return formatMap(x, formatFloat)
	case map[string]int:
		return formatMap(x, func(n int) string { return fmt.Sprint(n) })
	case map[string]int64:
		return formatMap(x, func(n int64) string { return fmt.Sprint(n) })
	default:
		return fmt.Sprint(v)
	}
}

func formatFloat(f float64) string {
	switch a := math.Abs(f); {
	case a >= 1000 || a == 0:
		return fmt.Sprintf("%.0f", f)
	case a >= 10: // allocations per request, to the tenth that tells a change
		return fmt.Sprintf("%.1f", f)
	case a >= 1:
		return fmt.Sprintf("%.2f", f)
	default:
		return fmt.Sprintf("%.3g", f)
	}
}

func formatMap[V any](m map[string]V, format func(V) string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+" "+format(m[k]))
	}
	return strings.Join(parts, ", ")
}
