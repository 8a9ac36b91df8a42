package api

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// CertReloader serves the certificate pair in two PEM files and reads them
// again when either changes (modification time or size, checked at each
// TLS handshake), so a rotated Kubernetes Secret (cert-manager renews
// before expiry) is picked up by new connections without a restart.
// A pair that fails to load (the two files caught mid-update, a key that
// does not match) is logged and the previous pair kept; the next handshake
// tries again.
type CertReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu         sync.Mutex
	cert       *tls.Certificate
	certStamp  stamp
	keyStamp   stamp
	failedOnce stamp // the cert file's stamp of the last failed load, logged once
}

type stamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	return stamp{fi.ModTime(), fi.Size()}, nil
}

// NewCertReloader loads the pair once; an error names the file and what is
// wrong with it.
func NewCertReloader(certFile, keyFile string, log *slog.Logger) (*CertReloader, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &CertReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *CertReloader) load() error {
	cs, err := stampOf(r.certFile)
	if err != nil {
		return fmt.Errorf("--tls-cert %s: %w", r.certFile, err)
	}
	ks, err := stampOf(r.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-key %s: %w", r.keyFile, err)
	}
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate %s with key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert, r.certStamp, r.keyStamp = &pair, cs, ks
	return nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs, err1 := stampOf(r.certFile)
	ks, err2 := stampOf(r.keyFile)
	if err1 == nil && err2 == nil && (cs != r.certStamp || ks != r.keyStamp) {
		if err := r.load(); err != nil {
			if cs != r.failedOnce {
				r.log.Warn("TLS certificate not reloaded; serving the previous one", "err", err)
				r.failedOnce = cs
			}
		} else {
			r.log.Info("TLS certificate reloaded", "cert", r.certFile)
		}
	}
	return r.cert, nil
}

// ServerOption makes a gRPC server speak TLS only, with r's certificate: a
// plaintext client's connection fails its handshake.
func (r *CertReloader) ServerOption() grpc.ServerOption {
	return grpc.Creds(credentials.NewTLS(&tls.Config{GetCertificate: r.GetCertificate, MinVersion: tls.VersionTLS12}))
}
