package readmetest

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// curl runs a curl command with net/http, sending what curl sends (its
// Accept and User-Agent, the form content-type for -d without one) and
// renders what curl prints: with -i the status line and the headers (names
// in lower case, sorted), a blank line, then the body.
func (r *runner) curl(ctx context.Context, c Curl) (output, error) {
	if c.MaxTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.MaxTime)
		defer cancel()
	}
	var body io.Reader
	if c.HasBody {
		body = strings.NewReader(c.Body)
	}
	req, err := http.NewRequestWithContext(ctx, c.Method, c.URL, body)
	if err != nil {
		return output{}, err
	}
	req.Header.Set("user-agent", "curl/8")
	req.Header.Set("accept", "*/*")
	for _, h := range c.Headers {
		switch {
		case strings.EqualFold(h[0], "host"):
			req.Host = h[1]
		case strings.EqualFold(h[0], "user-agent"), strings.EqualFold(h[0], "accept"):
			req.Header.Set(h[0], h[1])
		default:
			req.Header.Add(h[0], h[1])
		}
	}
	if _, ok := c.Header("content-type"); c.HasBody && !ok {
		req.Header.Set("content-type", "application/x-www-form-urlencoded")
	}
	resp, err := r.httpClient().Do(req)
	if err != nil {
		return output{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil && c.MaxTime > 0 && ctx.Err() != nil:
		// --max-time ended the transfer: curl prints what came before it.
	case err != nil:
		return output{}, fmt.Errorf("reading the body: %w", err)
	}
	res := httpResult{status: resp.Proto + " " + resp.Status, header: resp.Header, body: string(b)}
	out := output{text: res.body}
	if c.Include {
		out.text = res.render()
	}
	out.compare = func(want string, vars Vars) (bool, string) { return res.compare(want, c.Include, vars) }
	return out, nil
}

type httpResult struct {
	status string // "HTTP/1.1 200 OK"
	header http.Header
	body   string
}

func (h httpResult) render() string {
	var b strings.Builder
	b.WriteString(h.status + "\n")
	names := slices.Sorted(maps.Keys(h.header))
	for _, n := range names {
		for _, v := range h.header[n] {
			fmt.Fprintf(&b, "%s: %s\n", strings.ToLower(n), v)
		}
	}
	b.WriteString("\n" + h.body)
	return b.String()
}

// compare matches the README's output: with -i its first line is the
// status line, then the headers that matter (each must be present with a
// matching value; others the response has are not shown), a blank line and
// the body. The body must match as a whole (none shown: an empty body).
func (h httpResult) compare(want string, include bool, vars Vars) (bool, string) {
	want = strings.TrimRight(want, "\n")
	wantBody := want
	if include {
		head, body, _ := strings.Cut(want, "\n\n")
		wantBody = body
		lines := strings.Split(head, "\n")
		if !Match(strings.TrimSpace(lines[0]), h.status, vars) {
			return false, fmt.Sprintf("status line %q, want %q", h.status, lines[0])
		}
		for _, l := range lines[1:] {
			name, value, ok := strings.Cut(l, ":")
			if !ok {
				return false, fmt.Sprintf("the README's header line %q has no ':'", l)
			}
			value = strings.TrimSpace(value)
			matched := false
			for _, v := range h.header.Values(strings.TrimSpace(name)) {
				try := maps.Clone(vars)
				if Match(value, v, try) {
					maps.Copy(vars, try)
					matched = true
					break
				}
			}
			if !matched {
				return false, fmt.Sprintf("header %s: %q, want %q", name, h.header.Values(strings.TrimSpace(name)), value)
			}
		}
	}
	got := strings.TrimRight(h.body, "\n")
	if !Match(wantBody, got, vars) {
		return false, fmt.Sprintf("body %q, want %q", got, wantBody)
	}
	return true, ""
}
