package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// healthcheck asks a running processor's admin endpoint whether it is ready
// (or alive), for container health checks: the image has no shell or curl.
// It succeeds on a 2xx answer and fails, naming the reasons the endpoint
// gives, on anything else.
func healthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("healthcheck", stderr)
	admin := fs.String("admin", "127.0.0.1:9090", "admin address of the processor (serve --admin)")
	path := fs.String("path", "/readyz", "/readyz (ready to serve) or /healthz (alive)")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !strings.HasPrefix(*path, "/") {
		return usageError{fmt.Sprintf("--path %q must start with /", *path)}
	}
	// The admin port serves plain HTTP; serve binds it to an address, so a
	// wildcard bind is probed on loopback.
	host := *admin
	for _, wildcard := range []string{"0.0.0.0:", "[::]:", ":"} {
		if port, ok := strings.CutPrefix(host, wildcard); ok {
			host = "127.0.0.1:" + port
			break
		}
	}
	url := "http://" + host + *path

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usageError{fmt.Sprintf("--admin %q: %v", *admin, err)}
	}
	// One request, then the process exits: no keep-alive. A fresh Transport
	// also ignores HTTP_PROXY, which must not apply to a local port.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s: no answer within %s", url, *timeout)
		}
		return fmt.Errorf("%s: %w", url, err)
	}
	defer resp.Body.Close()
	// Bounded: the reasons fit in a line or two; a health check log is small.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	body = bytes.TrimSpace(body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	fmt.Fprintf(stdout, "%s: %s\n", url, resp.Status)
	return nil
}
