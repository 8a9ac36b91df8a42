// Small RSA keys are made only to check that they are refused.
//
//go:debug rsa1024min=0

package message

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/emersion/go-msgauth/dkim"
)

// writeKey writes k as PKCS#8 PEM (PKCS#1 for RSA when pkcs1) and returns
// the file's path.
func writeKey(t testing.TB, k crypto.Signer, pkcs1 bool) string {
	t.Helper()
	var block *pem.Block
	if rk, ok := k.(*rsa.PrivateKey); ok && pkcs1 {
		block = &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)}
	} else {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		block = &pem.Block{Type: "PRIVATE KEY", Bytes: der}
	}
	f, err := os.CreateTemp(t.TempDir(), "dkim-*.pem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pem.Encode(f, block); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func rsaKey(t testing.TB, bits int) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ed25519Key(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// dnsOf answers the verifier's TXT lookups with the keys' records, as the
// zone would once `rangecast domains records` is published.
func dnsOf(t testing.TB, d *DKIM) *dkim.VerifyOptions {
	t.Helper()
	zone := map[string]string{}
	for _, k := range d.Keys() {
		rec, err := k.Record()
		if err != nil {
			t.Fatal(err)
		}
		zone[k.RecordName()] = rec
	}
	return &dkim.VerifyOptions{LookupTXT: func(name string) ([]string, error) {
		if rec, ok := zone[name]; ok {
			return []string{rec}, nil
		}
		return nil, &os.PathError{Op: "lookup", Path: name, Err: os.ErrNotExist}
	}}
}

// verify checks every signature of raw and returns the verifications.
func verify(t testing.TB, d *DKIM, raw []byte) []*dkim.Verification {
	t.Helper()
	vs, err := dkim.VerifyWithOptions(bytes.NewReader(raw), dnsOf(t, d))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return vs
}

func TestDKIMSignsBroadcastVerifies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_ = dir
	// Two selectors side by side (a rotation in progress), RSA and Ed25519.
	d, err := LoadDKIM([]string{
		"example.com=rc2026:" + writeKey(t, rsaKey(t, 2048), true),
		"example.com=ed2026:" + writeKey(t, ed25519Key(t), false),
	})
	if err != nil {
		t.Fatal(err)
	}
	if w := d.Warnings(); len(w) != 0 {
		t.Errorf("warnings for RSA 2048 + Ed25519: %q", w)
	}
	tmpl := baseTemplate()
	tmpl.HTML += `<p><a href="{{.UnsubscribeURL}}">Unsubscribe</a></p>`
	r := mustRender(t, mustCompile(t, tmpl), baseParams())
	signed, ok, err := d.Sign(r)
	if err != nil || !ok {
		t.Fatalf("Sign: signed %v, %v", ok, err)
	}
	if !bytes.HasSuffix(signed.Bytes, r.Bytes) || signed.MessageID != r.MessageID || signed.To != r.To {
		t.Fatal("signing changed the message rather than only prepending its signatures")
	}
	vs := verify(t, d, signed.Bytes)
	if len(vs) != 2 {
		t.Fatalf("%d signatures, want one per selector (2)", len(vs))
	}
	for _, v := range vs {
		if v.Err != nil {
			t.Errorf("signature of %s does not verify: %v", v.Domain, v.Err)
		}
		if v.Domain != "example.com" {
			t.Errorf("d=%s, want example.com", v.Domain)
		}
		var signedHeaders []string
		for _, h := range v.HeaderKeys {
			signedHeaders = append(signedHeaders, strings.ToLower(h))
		}
		for _, want := range []string{"from", "to", "subject", "date", "message-id", "mime-version", "content-type", "list-unsubscribe", "list-unsubscribe-post", "feedback-id"} {
			if !slices.Contains(signedHeaders, want) {
				t.Errorf("h= lacks %s: %v", want, v.HeaderKeys)
			}
		}
	}
	sig := string(signed.Bytes[:len(signed.Bytes)-len(r.Bytes)])
	for _, want := range []string{"c=relaxed/relaxed", "a=rsa-sha256", "a=ed25519-sha256", "s=rc2026", "s=ed2026"} {
		if !strings.Contains(strings.Join(strings.Fields(sig), ""), strings.ReplaceAll(want, " ", "")) {
			t.Errorf("signatures lack %s:\n%s", want, sig)
		}
	}

	// Any change to a signed header or the body breaks both signatures.
	for name, tamper := range map[string]func([]byte) []byte{
		"unsubscribe link": func(b []byte) []byte {
			return bytes.Replace(b, []byte("List-Unsubscribe: <https://example.com/unsub?t=abc>"), []byte("List-Unsubscribe: <https://evil.example/unsub?t=abc>"), 1)
		},
		"body": func(b []byte) []byte { return bytes.Replace(b, []byte("Your plan"), []byte("Your PLAN"), 1) },
		"added List-Unsubscribe-Post": func(b []byte) []byte {
			return bytes.Replace(b, []byte("\r\nFrom:"), []byte("\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\nFrom:"), 1)
		},
		// Fields the message lacks are signed as absent (tester: a
		// Reply-To added to a replayed copy still verified).
		"added Reply-To": func(b []byte) []byte {
			return bytes.Replace(b, []byte("\r\nFrom:"), []byte("\r\nReply-To: phish@evil.example\r\nFrom:"), 1)
		},
		"added Cc": func(b []byte) []byte {
			return bytes.Replace(b, []byte("\r\nFrom:"), []byte("\r\nCc: victim@example.org\r\nFrom:"), 1)
		},
		"added In-Reply-To": func(b []byte) []byte {
			return bytes.Replace(b, []byte("\r\nFrom:"), []byte("\r\nIn-Reply-To: <x@evil.example>\r\nFrom:"), 1)
		},
	} {
		raw := tamper(bytes.Clone(signed.Bytes))
		if bytes.Equal(raw, signed.Bytes) {
			t.Fatalf("%s: tampering changed nothing", name)
		}
		for _, v := range verify(t, d, raw) {
			if v.Err == nil {
				t.Errorf("%s changed, yet a signature still verifies", name)
			}
		}
	}
}

func TestDKIMSignsTransactionalVerifies(t *testing.T) {
	t.Parallel()
	d, err := LoadDKIM([]string{"shop.example=tx1:" + writeKey(t, rsaKey(t, 2048), false)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := RenderTransactional(Transactional{
		FromName: "Shop", FromAddress: "orders@mail.shop.example", To: "ada@example.org",
		Subject: "Your receipt", Text: "Thanks.\n.\nA dot line.", HTML: "<p>Thanks.</p>",
	}, TransactionalMessageID("01J9ZQ8A6C5D4E3F2G1H0J9K8M", "mail.shop.example"), testDate)
	if err != nil {
		t.Fatal(err)
	}
	// mail.shop.example is signed as shop.example: aligned under DMARC's
	// relaxed alignment.
	signed, ok, err := d.Sign(r)
	if err != nil || !ok {
		t.Fatalf("Sign: signed %v, %v", ok, err)
	}
	vs := verify(t, d, signed.Bytes)
	if len(vs) != 1 || vs[0].Err != nil || vs[0].Domain != "shop.example" {
		t.Fatalf("verifications: %+v", vs)
	}
	if !strings.Contains(string(signed.Bytes), "Feedback-ID: transactional:mail.shop.example:transactional:rangecast\r\n") {
		t.Errorf("no transactional Feedback-ID:\n%s", signed.Bytes)
	}
}

func TestDKIMDomainWithoutKeyUnsigned(t *testing.T) {
	t.Parallel()
	d, err := LoadDKIM([]string{"example.net=s1:" + writeKey(t, ed25519Key(t), false)})
	if err != nil {
		t.Fatal(err)
	}
	r := mustRender(t, mustCompile(t, baseTemplate()), baseParams())
	out, ok, err := d.Sign(r)
	if err != nil || ok || !bytes.Equal(out.Bytes, r.Bytes) {
		t.Fatalf("mail from example.com with only an example.net key: signed %v, %v", ok, err)
	}
	var none *DKIM
	if out, ok, err := none.Sign(r); err != nil || ok || !bytes.Equal(out.Bytes, r.Bytes) {
		t.Fatalf("nil DKIM: signed %v, %v", ok, err)
	}
	if err := d.CheckDomains([]string{"example.com"}); err == nil || !strings.Contains(err.Error(), "example.net") {
		t.Errorf("CheckDomains: %v, want an error naming example.net", err)
	}
	if err := d.CheckDomains([]string{"news.example.net", "example.com"}); err != nil {
		t.Errorf("CheckDomains with a subdomain of the key's: %v", err)
	}
	if got := d.Warnings(); len(got) != 1 || !strings.Contains(got[0], "only Ed25519") {
		t.Errorf("warnings = %q, want one about Ed25519 alone", got)
	}
	if d.For("com") != nil || d.For("net") != nil {
		t.Error("a bare TLD found keys")
	}
}

func TestDKIMRefusesBadKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "unreadable.pem")
	if err := os.WriteFile(unreadable, []byte("x"), 0o000); err != nil {
		t.Fatal(err)
	}
	encrypted := filepath.Join(dir, "encrypted.pem")
	if err := os.WriteFile(encrypted, []byte("-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mangled := filepath.Join(dir, "mangled.pem")
	if err := os.WriteFile(mangled, []byte("-----BEGIN PRIVATE KEY-----\n!!not base64!!\n-----END PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	small := writeKey(t, rsaKey(t, 768), true)
	ok := writeKey(t, ed25519Key(t), false)
	for _, tc := range []struct {
		name string
		spec []string
		want string
	}{
		{"missing file", []string{"example.com=s1:" + filepath.Join(dir, "nope.pem")}, "no such file"},
		{"not PEM", []string{"example.com=s1:" + garbage}, "no PEM block"},
		{"encrypted", []string{"example.com=s1:" + encrypted}, "encrypted with a passphrase"},
		{"PEM body not base64", []string{"example.com=s1:" + mangled}, "cannot be decoded"},
		{"RSA 768", []string{"example.com=s1:" + small}, "RSA key of 768 bits"},
		{"no selector", []string{"example.com=" + ok}, "DOMAIN=SELECTOR:KEYFILE"},
		{"no domain", []string{"s1:" + ok}, "DOMAIN=SELECTOR:KEYFILE"},
		{"dotted selector", []string{"example.com=a.b:" + ok}, "one DNS label"},
		{"twice", []string{"example.com=s1:" + ok, "Example.com=s1:" + ok}, "given twice"},
	} {
		_, err := LoadDKIM(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	if os.Geteuid() != 0 { // root reads a mode-000 file
		if _, err := LoadDKIM([]string{"example.com=s1:" + unreadable}); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("unreadable file: %v", err)
		}
	}
	// 1024 bits is legal but gets a warning.
	d, err := LoadDKIM([]string{"example.com=s1:" + writeKey(t, rsaKey(t, 1024), false)})
	if err != nil {
		t.Fatal(err)
	}
	if w := d.Warnings(); len(w) != 1 || !strings.Contains(w[0], "1024") {
		t.Errorf("warnings = %q", w)
	}
	if d, err := LoadDKIM([]string{"", " "}); d != nil || err != nil {
		t.Errorf("no specs: %v, %v; want nil, nil", d, err)
	}
}
