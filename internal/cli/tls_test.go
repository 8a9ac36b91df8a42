package cli

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rangecast/rangecast/internal/api"
	"github.com/rangecast/rangecast/internal/server"
	"github.com/rangecast/rangecast/internal/testenv"
)

// testCA is a certificate authority made for one test: nothing is kept on
// disk beyond the test's temporary folder.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA certificate, PEM
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	file := filepath.Join(dir, name+".crt")
	writePEM(t, file, "CERTIFICATE", der)
	return &testCA{cert: cert, key: key, file: file}
}

// issue writes a server certificate for localhost and 127.0.0.1 signed by
// ca to certFile and keyFile.
func (ca *testCA) issue(t *testing.T, certFile, keyFile string, serial int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "coordinator"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost", "coordinator.rangecast.svc"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", kder)
}

func writePEM(t *testing.T, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTLS: a coordinator with --tls-cert/--tls-key answers the CLI that
// trusts its CA (--ca), refuses plaintext, is refused by a CLI that does not
// trust it, and serves a rotated certificate to new connections without a
// restart.
func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca1, ca2 := newTestCA(t, dir, "ca1"), newTestCA(t, dir, "ca2")
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca1.issue(t, certFile, keyFile, 10)

	certs, err := api.NewCertReloader(certFile, keyFile, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	st := testenv.SQLite(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewGRPCServer(api.Config{Store: st, Log: slog.New(slog.DiscardHandler)}, certs.ServerOption())
	go srv.Serve(lis) //nolint:errcheck
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()
	run := func(args ...string) (string, error) {
		t.Helper()
		return rangecast(t, "", append([]string{"--addr", addr}, args...)...)
	}

	if out, err := run("--ca", ca1.file, "segments", "list"); err != nil || !strings.Contains(out, "no segments") {
		t.Fatalf("with the CA: %v\n%s", err, out)
	}
	if out, err := run("--ca", ca1.file, "--addr", "localhost:"+portOf(addr), "segments", "create", "over-tls"); err != nil {
		t.Fatalf("with the CA, by name: %v\n%s", err, out)
	}
	// Plaintext is refused, and the error says what to do.
	_, err = run("segments", "list")
	if err == nil || !strings.Contains(describe(err), "--ca FILE") {
		t.Errorf("plaintext against TLS: %v; want a refusal that names --ca", err)
	}
	t.Logf("plaintext against TLS: %s", describe(err))
	// TLS without the CA (the system's roots) does not trust it.
	_, err = run("--tls", "segments", "list")
	if err == nil || !strings.Contains(describe(err), "not trusted") {
		t.Errorf("--tls without the CA: %v; want the certificate not trusted, with what to do", err)
	}
	t.Logf("--tls without the CA: %s", describe(err))
	_, err = run("--ca", ca2.file, "segments", "list")
	if err == nil || !strings.Contains(describe(err), "not trusted") {
		t.Errorf("another CA: %v; want the certificate not trusted", err)
	}
	_, err = run("--ca", certFile+".missing", "segments", "list")
	if err == nil || !strings.Contains(err.Error(), "--ca") {
		t.Errorf("a missing --ca file: %v", err)
	}
	_, err = run("--ca", keyFile, "segments", "list")
	if err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("--ca naming a key: %v", err)
	}

	// Rotation: the files now hold a certificate of ca2. New connections
	// get it; the server was not restarted. (The modification time is moved
	// on explicitly: some file systems keep whole seconds.)
	ca2.issue(t, certFile, keyFile, 11)
	later := time.Now().Add(2 * time.Second)
	for _, f := range []string{certFile, keyFile} {
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := run("--ca", ca2.file, "segments", "list"); err != nil || !strings.Contains(out, "over-tls") {
		t.Fatalf("after rotation, with the new CA: %v\n%s", err, out)
	}
	if _, err := run("--ca", ca1.file, "segments", "list"); err == nil {
		t.Error("after rotation, the old CA is still trusted: the certificate was not reloaded")
	}
	// A half-written pair (a key that does not match) keeps the last good
	// certificate.
	ca1.issue(t, certFile, filepath.Join(dir, "other.key"), 12)
	later = later.Add(2 * time.Second)
	if err := os.Chtimes(certFile, later, later); err != nil {
		t.Fatal(err)
	}
	if out, err := run("--ca", ca2.file, "segments", "list"); err != nil {
		t.Fatalf("after a mismatched pair, the previous certificate is not served: %v\n%s", err, out)
	}
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// A CLI that asks for TLS of a plaintext coordinator is told so.
func TestTLSAgainstPlaintext(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	st := testenv.SQLite(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewGRPCServer(api.Config{Store: st, Log: slog.New(slog.DiscardHandler)})
	go srv.Serve(lis) //nolint:errcheck
	t.Cleanup(srv.Stop)
	_, err = rangecast(t, "", "--addr", lis.Addr().String(), "--ca", ca.file, "segments", "list")
	if err == nil || !strings.Contains(describe(err), "plaintext") {
		t.Errorf("TLS against plaintext: %v; want it said the coordinator speaks plaintext", err)
	}
	t.Logf("TLS against plaintext: %s", describe(err))
	_, err = rangecast(t, "", "--addr", lis.Addr().String(), "--tls-server-name", "x", "segments", "list")
	if err == nil || !strings.Contains(err.Error(), "needs TLS") {
		t.Errorf("--tls-server-name alone: %v", err)
	}
}

// The dev stack with --tls-cert/--tls-key: the coordinator's own wiring
// serves TLS only, and a bad pair stops the start.
func TestTLSDevStack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.issue(t, certFile, keyFile, 20)
	o := server.StackOptions{Dir: t.TempDir(), GRPCAddr: "127.0.0.1:0", Workers: 1, Log: slog.New(slog.DiscardHandler),
		TLSCert: certFile, TLSKey: keyFile}
	st, err := server.StartStack(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Stop() }) //nolint:errcheck
	if out, err := rangecast(t, "", "--addr", st.GRPCAddr, "--ca", ca.file, "segments", "create", "tls"); err != nil {
		t.Fatalf("with the CA: %v\n%s", err, out)
	}
	if _, err := rangecast(t, "", "--addr", st.GRPCAddr, "segments", "list"); err == nil {
		t.Error("plaintext against the TLS dev stack succeeded")
	}
	o.Dir, o.TLSKey = t.TempDir(), certFile // a certificate is no key
	if st, err := server.StartStack(context.Background(), o); err == nil {
		st.Stop() //nolint:errcheck
		t.Error("a stack with a bad key pair started")
	}
}
