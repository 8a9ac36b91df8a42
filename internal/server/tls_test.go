package server

import (
	"strings"
	"testing"
)

// Half a TLS configuration is refused before anything starts; a pair that
// does not load names the file.
func TestCoordinatorTLSOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []CoordinatorOptions{{TLSCert: "tls.crt"}, {TLSKey: "tls.key"}} {
		if _, err := o.newCerts(); err == nil || !strings.Contains(err.Error(), "both --tls-cert and --tls-key") {
			t.Errorf("%+v: %v", o, err)
		}
	}
	o := CoordinatorOptions{TLSCert: t.TempDir() + "/missing.crt", TLSKey: t.TempDir() + "/missing.key"}
	if _, err := o.newCerts(); err == nil || !strings.Contains(err.Error(), "--tls-cert") || !strings.Contains(err.Error(), "missing.crt") {
		t.Errorf("missing files: %v", err)
	}
	if c, err := (CoordinatorOptions{}).newCerts(); c != nil || err != nil {
		t.Errorf("no TLS: %v, %v", c, err)
	}
}
