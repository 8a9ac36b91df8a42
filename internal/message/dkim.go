package message

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/emersion/go-msgauth/dkim"
)

// DKIM signing (RFC 6376, Ed25519 by RFC 8463). A message is signed by the
// keys of its From domain, or of the nearest parent domain that has keys:
// d=example.com on mail from news.example.com is aligned under DMARC's
// default relaxed alignment. Every key of that domain signs, so two
// selectors configured side by side put two signatures on each message and
// a key can be rotated without a moment in which mail goes out unsigned or
// signed only by a key whose DNS record is not yet (or no longer) published.

// MinRSABits is the smallest RSA key accepted at all; RecommendedRSABits is
// what Gmail and Yahoo expect of bulk senders.
const (
	MinRSABits         = 1024
	RecommendedRSABits = 2048
)

// DKIMHeaders are the fields every signature covers. A name the message
// lacks (List-Unsubscribe on transactional mail) is still listed, and each
// name is listed once more than the message has it ("oversigning",
// RFC 6376 8.15): a field of that name added later, by anyone, breaks the
// signature rather than riding on it. A second List-Unsubscribe put above
// the real one would otherwise pass as signed.
//
// Reply-To, Cc, In-Reply-To and References (RFC 6376 5.4.1) are covered
// too, whether the message has them (transactional mail's extra fields) or
// not: unsigned, a replayed message could have a Reply-To added or swapped
// for a phisher's and still pass DKIM and DMARC (tester). Not Sender: a
// relay may add one (Exim's submission mode), which would break every
// signature (review).
var DKIMHeaders = []string{
	"From", "To", "Subject", "Date", "Message-ID",
	"MIME-Version", "Content-Type", "Content-Transfer-Encoding",
	"List-Unsubscribe", "List-Unsubscribe-Post", "Feedback-ID",
	"Reply-To", "Cc", "In-Reply-To", "References",
}

// dkimHeaderKeys is h=: DKIMHeaders, then each of them again.
var dkimHeaderKeys = append(slices.Clone(DKIMHeaders), DKIMHeaders...)

// DKIMKey is one private key and where it is published: the TXT record at
// Selector._domainkey.Domain.
type DKIMKey struct {
	Domain   string
	Selector string
	File     string // where it was read from, for messages
	Signer   crypto.Signer
}

// Algorithm is the key's k= tag: "rsa" or "ed25519".
func (k DKIMKey) Algorithm() string {
	if _, ok := k.Signer.Public().(ed25519.PublicKey); ok {
		return "ed25519"
	}
	return "rsa"
}

// Bits is the RSA modulus size, or 256 for Ed25519.
func (k DKIMKey) Bits() int {
	if pub, ok := k.Signer.Public().(*rsa.PublicKey); ok {
		return pub.N.BitLen()
	}
	return 256
}

// RecordName is the DNS name of the key's TXT record.
func (k DKIMKey) RecordName() string { return k.Selector + "._domainkey." + k.Domain }

// Record is the TXT record's value, derived from the private key: what to
// publish at RecordName.
func (k DKIMKey) Record() (string, error) {
	var p []byte
	switch pub := k.Signer.Public().(type) {
	case ed25519.PublicKey:
		// RFC 8463 3.2: the bare 32-byte key, not a SubjectPublicKeyInfo.
		p = pub
	case *rsa.PublicKey:
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			return "", err
		}
		p = der
	default:
		return "", fmt.Errorf("dkim key %s: unsupported key type %T", k.RecordName(), pub)
	}
	return "v=DKIM1; k=" + k.Algorithm() + "; p=" + base64.StdEncoding.EncodeToString(p), nil
}

// ParseDKIMKeySpec splits "DOMAIN=SELECTOR:KEYFILE" (the --dkim-key flag).
func ParseDKIMKeySpec(spec string) (domain, selector, file string, err error) {
	spec = strings.TrimSpace(spec)
	d, rest, ok := strings.Cut(spec, "=")
	s, f, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || d == "" || s == "" || f == "" {
		return "", "", "", fmt.Errorf("dkim key %q: write DOMAIN=SELECTOR:KEYFILE, e.g. example.com=rc2026:/etc/rangecast/dkim/rc2026.pem", spec)
	}
	d = strings.ToLower(strings.TrimSuffix(d, "."))
	if !isHostname(d) {
		return "", "", "", fmt.Errorf("dkim key %q: %q is not a domain name", spec, d)
	}
	if !isHostname(strings.ToLower(s)) || strings.Contains(s, ".") {
		return "", "", "", fmt.Errorf("dkim key %q: selector %q must be one DNS label (letters, digits, '-')", spec, s)
	}
	return d, s, f, nil
}

// LoadDKIMKey reads a PEM private key (PKCS#8 "PRIVATE KEY", or PKCS#1 "RSA
// PRIVATE KEY" as openssl genrsa writes it): RSA of at least MinRSABits, or
// Ed25519.
func LoadDKIMKey(domain, selector, file string) (DKIMKey, error) {
	name := selector + "._domainkey." + domain
	raw, err := os.ReadFile(file)
	if err != nil {
		return DKIMKey{}, fmt.Errorf("dkim key %s: %w", name, err)
	}
	signer, err := parsePrivateKey(raw)
	if err != nil {
		return DKIMKey{}, fmt.Errorf("dkim key %s (%s): %w", name, file, err)
	}
	k := DKIMKey{Domain: domain, Selector: selector, File: file, Signer: signer}
	if k.Algorithm() == "rsa" && k.Bits() < MinRSABits {
		return DKIMKey{}, fmt.Errorf("dkim key %s (%s): RSA key of %d bits; receivers ignore keys under %d bits, generate one of %d (openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048)", name, file, k.Bits(), MinRSABits, RecommendedRSABits)
	}
	return k, nil
}

func parsePrivateKey(raw []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(raw)
	if block == nil {
		if bytes.Contains(raw, []byte("-----BEGIN ")) {
			// The armour is there; what is between it is not base64
			// (a truncated or hand-edited file).
			return nil, errors.New("a PEM key whose body cannot be decoded (truncated, or edited by hand); export the key again")
		}
		return nil, errors.New("no PEM block; expected -----BEGIN PRIVATE KEY----- (PKCS#8) or -----BEGIN RSA PRIVATE KEY-----")
	}
	if block.Type == "ENCRYPTED PRIVATE KEY" || block.Headers["Proc-Type"] != "" {
		return nil, errors.New("the key is encrypted with a passphrase, which a worker cannot enter; write it out unencrypted (openssl pkey -in KEY -out KEY.pem) and keep the file readable by the worker only")
	}
	switch block.Type {
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		switch k := k.(type) {
		case *rsa.PrivateKey:
			return k, nil
		case ed25519.PrivateKey:
			return k, nil
		}
		return nil, fmt.Errorf("%T keys cannot sign DKIM; use RSA or Ed25519", k)
	}
	return nil, fmt.Errorf("PEM block %q is not a private key", block.Type)
}

// DKIM signs messages with the keys of their From domain. A nil *DKIM signs
// nothing. It is safe for concurrent use.
type DKIM struct {
	keys    []DKIMKey            // in the order given
	domains map[string][]DKIMKey // by domain

	onUnsigned func(domain string)
	unsigned   sync.Map // From domains reported to onUnsigned
}

// OnUnsigned sets f to be called, once per domain, when Sign meets mail
// from a domain no key covers: the From domains are not known when a page
// worker starts (broadcasts are created later), so a key for the wrong
// domain shows only then. Call it before the first Sign.
func (d *DKIM) OnUnsigned(f func(domain string)) {
	if d != nil {
		d.onUnsigned = f
	}
}

// NewDKIM checks keys (one domain and selector at most once) and returns a
// signer using them.
func NewDKIM(keys []DKIMKey) (*DKIM, error) {
	d := &DKIM{domains: map[string][]DKIMKey{}}
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k.RecordName()] {
			return nil, fmt.Errorf("dkim key %s is given twice", k.RecordName())
		}
		seen[k.RecordName()] = true
		d.keys = append(d.keys, k)
		d.domains[k.Domain] = append(d.domains[k.Domain], k)
	}
	return d, nil
}

// LoadDKIM parses and loads each "DOMAIN=SELECTOR:KEYFILE" spec. No specs
// gives nil: nothing is signed (an ESP in front signs for you).
func LoadDKIM(specs []string) (*DKIM, error) {
	var keys []DKIMKey
	for _, spec := range specs {
		if strings.TrimSpace(spec) == "" {
			continue
		}
		domain, selector, file, err := ParseDKIMKeySpec(spec)
		if err != nil {
			return nil, err
		}
		k, err := LoadDKIMKey(domain, selector, file)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	return NewDKIM(keys)
}

// Keys are the configured keys, in the order given.
func (d *DKIM) Keys() []DKIMKey {
	if d == nil {
		return nil
	}
	return slices.Clone(d.keys)
}

// Warnings are what is legal but unwise in the configuration: RSA keys
// under RecommendedRSABits, and a domain signed only with Ed25519, which
// many receivers do not verify yet (RFC 8463 recommends an RSA signature
// beside it).
func (d *DKIM) Warnings() []string {
	if d == nil {
		return nil
	}
	var out []string
	for _, k := range d.keys {
		if k.Algorithm() == "rsa" && k.Bits() < RecommendedRSABits {
			out = append(out, fmt.Sprintf("dkim key %s is RSA %d bits; Gmail and Yahoo expect %d", k.RecordName(), k.Bits(), RecommendedRSABits))
		}
	}
	for _, dom := range d.Domains() {
		if !slices.ContainsFunc(d.domains[dom], func(k DKIMKey) bool { return k.Algorithm() == "rsa" }) {
			out = append(out, fmt.Sprintf("dkim domain %s has only Ed25519 keys; many receivers verify only RSA, so add an RSA selector beside it", dom))
		}
	}
	return out
}

// Domains are the signing domains, sorted.
func (d *DKIM) Domains() []string {
	if d == nil {
		return nil
	}
	out := make([]string, 0, len(d.domains))
	for dom := range d.domains {
		out = append(out, dom)
	}
	slices.Sort(out)
	return out
}

// For returns the keys that sign mail from fromDomain: those of the domain
// itself or else of its nearest parent with keys (relaxed alignment).
func (d *DKIM) For(fromDomain string) []DKIMKey {
	if d == nil {
		return nil
	}
	dom := strings.ToLower(fromDomain)
	for dom != "" {
		if ks := d.domains[dom]; len(ks) > 0 {
			return ks
		}
		_, parent, ok := strings.Cut(dom, ".")
		if !ok || !strings.Contains(parent, ".") {
			return nil // never sign as a bare TLD
		}
		dom = parent
	}
	return nil
}

// CheckDomains returns an error naming every key whose domain signs none
// of fromDomains: where the From domains are known when the process
// starts, a key for a domain nobody sends from is a typo that would leave
// the real domain unsigned.
func (d *DKIM) CheckDomains(fromDomains []string) error {
	if d == nil {
		return nil
	}
	used := map[string]bool{}
	for _, f := range fromDomains {
		for _, k := range d.For(f) {
			used[k.Domain] = true
		}
	}
	var unused []string
	for _, dom := range d.Domains() {
		if !used[dom] {
			unused = append(unused, dom)
		}
	}
	if len(unused) > 0 {
		return fmt.Errorf("dkim keys for %s would sign no mail from %s (a key signs its own domain and the subdomains that have no key of their own); fix the DOMAIN part of --dkim-key", strings.Join(unused, ", "), strings.Join(fromDomains, ", "))
	}
	return nil
}

// Sign returns m with a DKIM-Signature field in front for every key of its
// From domain (m.From, the envelope sender rangecast sets to the From
// address), relaxed/relaxed over DKIMHeaders. signed is false when no key
// covers the domain; m is then returned as it is. The signature's t= is
// the time of signing, so a re-rendered message differs in it and in b=
// only.
func (d *DKIM) Sign(m Rendered) (out Rendered, signed bool, err error) {
	if d == nil {
		return m, false, nil
	}
	domain := strings.ToLower(m.From[strings.LastIndexByte(m.From, '@')+1:])
	keys := d.For(domain)
	if len(keys) == 0 {
		if _, seen := d.unsigned.LoadOrStore(domain, true); !seen && d.onUnsigned != nil {
			d.onUnsigned(domain)
		}
		return m, false, nil
	}
	sigs := make([]string, 0, len(keys))
	size := len(m.Bytes)
	for _, k := range keys {
		s, err := dkim.NewSigner(&dkim.SignOptions{
			Domain:                 k.Domain,
			Selector:               k.Selector,
			Signer:                 k.Signer,
			HeaderCanonicalization: dkim.CanonicalizationRelaxed,
			BodyCanonicalization:   dkim.CanonicalizationRelaxed,
			HeaderKeys:             dkimHeaderKeys,
		})
		if err == nil {
			if _, err = s.Write(m.Bytes); err == nil {
				err = s.Close()
			} else {
				s.Close() //nolint:errcheck // the write's error is the one to report
			}
		}
		if err != nil {
			return m, false, fmt.Errorf("dkim sign %s as %s: %w", m.MessageID, k.RecordName(), err)
		}
		sig := s.Signature()
		sigs = append(sigs, sig)
		size += len(sig)
	}
	var b bytes.Buffer
	b.Grow(size)
	for _, s := range sigs {
		b.WriteString(s)
	}
	b.Write(m.Bytes)
	m.Bytes = b.Bytes()
	return m, true, nil
}
