package tlsconf

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// ca is a test certificate authority.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (c *ca) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// issue returns PEM certificate and key for a server (127.0.0.1) or client.
func (c *ca) issue(t *testing.T, serial int64, server bool, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "envoy"},
		NotBefore:    time.Now().Add(-2 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.Subject.CommonName = "kafka-ext-proc"
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

func write(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// files are a server pair and a client CA on disk.
type files struct{ cert, key, clientCA string }

func serverFiles(t *testing.T, serverCA, clientCA *ca) files {
	t.Helper()
	dir := t.TempDir()
	c, k := serverCA.issue(t, 100, true, time.Now().Add(time.Hour))
	f := files{cert: write(t, dir, "tls.crt", c), key: write(t, dir, "tls.key", k)}
	if clientCA != nil {
		f.clientCA = write(t, dir, "client-ca.crt", clientCA.pem)
	}
	return f
}

// serveTLS runs a TLS listener that completes handshakes and echoes the
// negotiated protocol.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { lis.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			// The handshake errors are the clients' to see.
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	return lis.Addr().String()
}

// dial handshakes as a client and returns the server's leaf.
func dial(addr string, roots *x509.CertPool, client *tls.Certificate) (*x509.Certificate, error) {
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// With TLS 1.3 a refused client certificate shows on the first read.
	if _, err := c.Read(make([]byte, 1)); err != nil && !strings.Contains(err.Error(), "EOF") {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

// client issues a client certificate pair.
func (c *ca) client(t *testing.T, serial int64, notAfter time.Time) *tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(c.issue(t, serial, false, notAfter))
	if err != nil {
		t.Fatal(err)
	}
	return &pair
}

func TestPlaintextWhenNothingGiven(t *testing.T) {
	cfg, err := Server("", "", "")
	if cfg != nil || err != nil {
		t.Fatalf("Server() = %v, %v; want nil, nil", cfg, err)
	}
}

func TestServerTLS(t *testing.T) {
	serverCA := newCA(t, "server CA")
	f := serverFiles(t, serverCA, nil)
	cfg, err := Server(f.cert, f.key, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClientAuth != tls.NoClientCert || cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("ClientAuth %v MinVersion %x", cfg.ClientAuth, cfg.MinVersion)
	}
	addr := serveTLS(t, cfg)
	leaf, err := dial(addr, serverCA.pool(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.SerialNumber.Int64() != 100 {
		t.Fatalf("served serial %v", leaf.SerialNumber)
	}
	if _, err := dial(addr, newCA(t, "other").pool(), nil); err == nil {
		t.Fatal("a client not trusting the server's CA connected")
	}
}

func TestServerMTLS(t *testing.T) {
	serverCA, clientCA, otherCA := newCA(t, "server CA"), newCA(t, "client CA"), newCA(t, "other CA")
	f := serverFiles(t, serverCA, clientCA)
	cfg, err := Server(f.cert, f.key, f.clientCA)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cfg)

	if _, err := dial(addr, serverCA.pool(), clientCA.client(t, 7, time.Now().Add(time.Hour))); err != nil {
		t.Fatalf("client with a certificate of the client CA: %v", err)
	}
	if _, err := dial(addr, serverCA.pool(), nil); err == nil {
		t.Fatal("a client without a certificate connected")
	}
	if _, err := dial(addr, serverCA.pool(), otherCA.client(t, 8, time.Now().Add(time.Hour))); err == nil {
		t.Fatal("a client with a certificate of another CA connected")
	}
	if _, err := dial(addr, serverCA.pool(), clientCA.client(t, 9, time.Now().Add(-time.Minute))); err == nil {
		t.Fatal("a client with an expired certificate connected")
	}
}

// The configuration works for grpc-go as the ext_proc server will use it.
func TestGRPCOverMTLS(t *testing.T) {
	serverCA, clientCA := newCA(t, "server CA"), newCA(t, "client CA")
	f := serverFiles(t, serverCA, clientCA)
	cfg, err := Server(f.cert, f.key, f.clientCA)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	check := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	client := clientCA.client(t, 7, time.Now().Add(time.Hour))
	if err := check(credentials.NewTLS(&tls.Config{RootCAs: serverCA.pool(), Certificates: []tls.Certificate{*client}})); err != nil {
		t.Fatalf("mTLS client: %v", err)
	}
	if err := check(credentials.NewTLS(&tls.Config{RootCAs: serverCA.pool()})); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if err := check(insecure.NewCredentials()); err == nil {
		t.Fatal("a plaintext client was served")
	}
}

func TestRotation(t *testing.T) {
	serverCA := newCA(t, "server CA")
	f := serverFiles(t, serverCA, nil)
	cfg, err := Server(f.cert, f.key, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cfg)
	serial := func() int64 {
		t.Helper()
		leaf, err := dial(addr, serverCA.pool(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.Int64()
	}
	if s := serial(); s != 100 {
		t.Fatalf("serial %d", s)
	}
	c, k := serverCA.issue(t, 200, true, time.Now().Add(2*time.Hour))
	// Half-way through a rotation (new certificate, old key) the old pair
	// is still served.
	write(t, filepath.Dir(f.cert), "tls.crt", c)
	if s := serial(); s != 100 {
		t.Fatalf("mid-rotation serial %d, want the old 100", s)
	}
	write(t, filepath.Dir(f.key), "tls.key", k)
	if s := serial(); s != 200 {
		t.Fatalf("after rotation serial %d, want 200", s)
	}
}

func TestServerErrors(t *testing.T) {
	serverCA := newCA(t, "server CA")
	dir := t.TempDir()
	c, k := serverCA.issue(t, 1, true, time.Now().Add(time.Hour))
	_, otherKey := serverCA.issue(t, 2, true, time.Now().Add(time.Hour))
	expiredC, expiredK := serverCA.issue(t, 3, true, time.Now().Add(-time.Minute))
	cert, key := write(t, dir, "tls.crt", c), write(t, dir, "tls.key", k)
	other := write(t, dir, "other.key", otherKey)
	garbage := write(t, dir, "garbage.pem", []byte("not PEM"))
	keyOnly := write(t, dir, "key-only.pem", k)
	for _, tc := range []struct {
		name                string
		cert, key, clientCA string
		want                string
	}{
		{"key without certificate", "", key, "", "both a certificate file and a key file"},
		{"certificate without key", cert, "", "", "both a certificate file and a key file"},
		{"client CA alone", "", "", cert, "both a certificate file and a key file"},
		{"missing certificate", filepath.Join(dir, "nope.crt"), key, "", "nope.crt"},
		{"key of another certificate", cert, other, "", "private key does not match public key"},
		{"expired certificate", write(t, dir, "old.crt", expiredC), write(t, dir, "old.key", expiredK), "", "expired at"},
		{"missing client CA", cert, key, filepath.Join(dir, "nope-ca.crt"), "nope-ca.crt"},
		{"client CA not PEM", cert, key, garbage, "holds no PEM certificate"},
		{"client CA holding a key", cert, key, keyOnly, "holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Server(tc.cert, tc.key, tc.clientCA)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Errorf("the error shows key material: %v", err)
			}
		})
	}
}
