// Package tlsconf builds the TLS configuration of the processor's ext_proc
// port. The port trusts its peer — request headers and the jwt_authn payload
// Envoy forwards decide who the caller is — so beyond listening
// on loopback only, it can require TLS and, with a client CA, a client
// certificate (mTLS) that only Envoy holds.
package tlsconf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Server returns the ext_proc port's TLS configuration, or nil when all three
// paths are empty (plaintext).
//
// certFile and keyFile are PEM files: the server certificate chain (leaf
// first) and its private key. With clientCAFile (PEM, one or more CA
// certificates), every client must present a certificate that chains to one
// of them; Envoy's ext_proc cluster then needs an UpstreamTlsContext with its
// client certificate.
//
// The certificate and key are read again when either file changes (checked
// at each handshake; Envoy keeps its HTTP/2 connections, so handshakes are
// rare), so a rotated certificate is served without a restart. A pair that
// does not load — caught between the writes of the two files — leaves the
// previous pair in use until the next handshake. The client CAs are read once.
func Server(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	switch {
	case certFile == "" && keyFile == "" && clientCAFile == "":
		return nil, nil
	case certFile == "" || keyFile == "":
		return nil, errors.New("TLS needs both a certificate file and a key file")
	}
	r := &reloader{certFile: certFile, keyFile: keyFile}
	if err := r.load(); err != nil {
		return nil, err
	}
	if leaf := r.cert.Leaf; time.Now().After(leaf.NotAfter) {
		return nil, fmt.Errorf("TLS certificate %s expired at %s", certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2"}, // gRPC is HTTP/2; grpc-go requires ALPN
		GetCertificate: r.get,
	}
	if clientCAFile != "" {
		pool, err := loadCAs(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// reloader serves the certificate pair, re-reading it when a file changes.
// It compares contents rather than modification times, which can be too
// coarse to tell two writes apart; the files are small and handshakes rare.
type reloader struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	certPEM []byte
	keyPEM  []byte
}

// load reads the pair if it changed; callers hold mu or own r.
func (r *reloader) load() error {
	c, err := os.ReadFile(r.certFile)
	if err != nil {
		return fmt.Errorf("reading the TLS certificate: %w", err)
	}
	k, err := os.ReadFile(r.keyFile)
	if err != nil {
		return fmt.Errorf("reading the TLS key: %w", err)
	}
	if r.cert != nil && bytes.Equal(c, r.certPEM) && bytes.Equal(k, r.keyPEM) {
		return nil
	}
	// X509KeyPair's errors name what is wrong, never the key's bytes.
	cert, err := tls.X509KeyPair(c, k)
	if err != nil {
		return fmt.Errorf("loading the TLS certificate %s and key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert, r.certPEM, r.keyPEM = &cert, c, k
	return nil
}

func (r *reloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.load() // on failure the previous pair stays: see Server
	return r.cert, nil
}

func loadCAs(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the TLS client CA file: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for len(b) > 0 {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("TLS client CA file %s: certificate %d: %w", path, n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("TLS client CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}
