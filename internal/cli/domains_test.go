package cli

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func writePEMKey(t *testing.T, k any) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// txtValue joins the quoted strings of the zone line for name.
func txtValue(t *testing.T, out, name string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, name+"\t") {
			var v strings.Builder
			for _, m := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(line, -1) {
				if len(m[1]) > 255 {
					t.Errorf("%s: a TXT string of %d bytes (at most 255)", name, len(m[1]))
				}
				v.WriteString(m[1])
			}
			return v.String()
		}
	}
	t.Fatalf("no record for %s in:\n%s", name, out)
	return ""
}

func TestDomainsRecords(t *testing.T) {
	t.Parallel()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, ek, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// No --addr and no coordinator: the command reads only the key files.
	out, err := rangecast(t, "", "domains", "records", "news.example.com",
		"--dkim-key", "example.com=rc2026:"+writePEMKey(t, rk), "--dkim-key", "example.com=ed2026:"+writePEMKey(t, ek),
		"--spf-ip", "203.0.113.7", "--spf-include", "_spf.relay.example", "--dmarc-rua", "dmarc@example.com")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	der, err := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := txtValue(t, out, "rc2026._domainkey.example.com."), "v=DKIM1; k=rsa; p="+base64.StdEncoding.EncodeToString(der); got != want {
		t.Errorf("RSA selector record:\n got %s\nwant %s", got, want)
	}
	if got, want := txtValue(t, out, "ed2026._domainkey.example.com."), "v=DKIM1; k=ed25519; p="+base64.StdEncoding.EncodeToString(pub); got != want {
		t.Errorf("Ed25519 selector record:\n got %s\nwant %s", got, want)
	}
	if got := txtValue(t, out, "news.example.com."); got != "v=spf1 include:_spf.relay.example ip4:203.0.113.7 -all" {
		t.Errorf("SPF: %s", got)
	}
	if got := txtValue(t, out, "_dmarc.news.example.com."); got != "v=DMARC1; p=none; rua=mailto:dmarc@example.com; adkim=r; aspf=r" {
		t.Errorf("DMARC: %s", got)
	}

	// A key for a domain this From domain is not under is refused.
	_, err = rangecast(t, "", "domains", "records", "news.example.com", "--dkim-key", "example.net=s1:"+writePEMKey(t, ek))
	if err == nil || !strings.Contains(err.Error(), "example.net") {
		t.Errorf("key for another domain: %v", err)
	}
	// Inputs that would print a record that does not work are refused,
	// each naming its flag: a published SPF permerror fails all mail.
	key := writePEMKey(t, ek)
	for _, c := range []struct{ flag, value string }{
		{"--spf-ip", "999.1.1.1"}, {"--spf-ip", "hello"}, {"--spf-ip", "1.2.3.4/99"}, {"--spf-ip", "203.0.113.7/24"}, {"--spf-ip", "fe80::1%eth0"},
		{"--spf-include", "bad..domain"}, {"--spf-include", "%{i}._spf.example"},
		{"--dmarc-rua", "notanemail"}, {"--dmarc-rua", "a@b.com;p=reject"}, {"--dmarc-rua", "a@b.com,c@d.com"},
	} {
		_, err := rangecast(t, "", "domains", "records", "example.org", "--dkim-key", "s1:"+key, c.flag, c.value)
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s %q: %v; want it refused naming the flag", c.flag, c.value, err)
		}
	}
	out, err = rangecast(t, "", "domains", "records", "example.org", "--dkim-key", "s1:"+key,
		"--spf-ip", "2001:db8::/48", "--spf-ip", "203.0.113.0/24")
	if err != nil || txtValue(t, out, "example.org.") != "v=spf1 ip6:2001:db8::/48 ip4:203.0.113.0/24 -all" {
		t.Errorf("networks: %v\n%s", err, out)
	}
	// SELECTOR:KEYFILE means the key of DOMAIN itself.
	out, err = rangecast(t, "", "domains", "records", "example.org", "--dkim-key", "s1:"+writePEMKey(t, ek))
	if err != nil || txtValue(t, out, "s1._domainkey.example.org.") == "" || !strings.Contains(out, "include:RELAY") {
		t.Errorf("bare selector: %v\n%s", err, out)
	}
}

// A body without {{.UnsubscribeURL}} is refused with the way to fix it;
// --no-unsubscribe-link accepts it, and status says so.
func TestBroadcastsCreateUnsubscribeLink(t *testing.T) {
	t.Parallel()
	addr, _ := testServer(t)
	html := writeFile(t, "plain.html", "<p>Hi {{.Name}}</p>")
	base := []string{"--addr", addr, "broadcasts", "create", "--name", "News", "--from", "news@example.com", "--subject", "Hello", "--html", html}
	out, err := rangecast(t, "", base...)
	if err == nil || !strings.Contains(describe(err), `<a href="{{.UnsubscribeURL}}">Unsubscribe</a>`) || !strings.Contains(describe(err), "--no-unsubscribe-link") {
		t.Fatalf("create without a link: %v\n%s", err, out)
	}
	out, err = rangecast(t, "", append(base, "--no-unsubscribe-link")...)
	if err != nil {
		t.Fatalf("create --no-unsubscribe-link: %v\n%s", err, out)
	}
	status, err := rangecast(t, "", "--addr", addr, "broadcasts", "status", strings.TrimSpace(out))
	if err != nil || !strings.Contains(status, "--no-unsubscribe-link") {
		t.Errorf("status: %v\n%s", err, status)
	}
}
