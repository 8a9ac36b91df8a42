package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emersion/go-smtp"

	"github.com/rangecast/rangecast/internal/capture"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := Rangecast()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestMailListAndShow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, err := capture.Start("127.0.0.1:0", capture.WithDir(filepath.Join(dir, "mail")))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := smtp.Dial(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	raw := "From: news@example.com\r\nTo: ann@example.org\r\nSubject: Hello Ann\r\nMessage-ID: <b1.c1@example.com>\r\n\r\nHi Ann\r\n"
	if err := c.SendMail("news@example.com", []string{"ann@example.org"}, strings.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	c.Close()

	out, err := runCLI(t, "mail", "list", "--dir", dir)
	if err != nil || !strings.Contains(out, "ann@example.org") || !strings.Contains(out, "Hello Ann") || !strings.Contains(out, "     1  ") {
		t.Fatalf("mail list: %v\n%s", err, out)
	}
	out, err = runCLI(t, "mail", "list", "--dir", dir, "--json")
	if err != nil || !strings.Contains(out, `"message_id": "b1.c1@example.com"`) {
		t.Fatalf("mail list --json: %v\n%s", err, out)
	}
	for _, id := range []string{"1", "<b1.c1@example.com>"} {
		out, err = runCLI(t, "mail", "show", id, "--dir", dir)
		if err != nil || out != raw {
			t.Fatalf("mail show %s: %v\n%q", id, err, out)
		}
	}
	if _, err := runCLI(t, "mail", "show", "7", "--dir", dir); err == nil || !strings.Contains(err.Error(), "mail list") {
		t.Fatalf("mail show of an unknown id: %v", err)
	}
	out, err = runCLI(t, "mail", "list", "--dir", t.TempDir())
	if err != nil || !strings.Contains(out, "no mail captured") {
		t.Fatalf("mail list of an empty folder: %v\n%s", err, out)
	}
}

// TestMailEscapesData: what a captured message says (its subject, its
// recipients, its body) reaches a terminal with its control characters,
// bidi overrides and stray 8-bit bytes made visible, never as bytes that
// could recolour, retitle or rewrite the terminal. A file or a pipe still
// gets the message byte for byte.
func TestMailEscapesData(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	raw := "From: news@example.com\r\n" +
		"To: \"a\u009b31mb\"@example.org, evil\u202etxt@example.org\r\n" +
		"Subject: =?utf-8?q?Hi_=1B]0;owned=07Ann=1B[2J?= \x9b31m\r\n" +
		"Message-ID: <e1@example.com>\r\n\r\n" +
		"Hi \x1b[31mAnn\x1b[0m\r\nover\rwrite \x9b2J\r\n"
	if err := os.MkdirAll(filepath.Join(dir, "mail"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mail", "1-e1@example.com.eml"), []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "mail", "list", "--dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`a\x9b31mb@example.org`, `evil\u202etxt@example.org`, `Hi \x1b]0;owned\x07Ann\x1b[2J ` + "\ufffd31m"} {
		if !strings.Contains(out, want) {
			t.Errorf("mail list: %q, want it to contain %q", out, want)
		}
	}
	if i := strings.IndexFunc(out, func(r rune) bool { return r < 0x20 && r != '\n' || r >= 0x7f && r < 0xa0 || r == 0x202e }); i >= 0 {
		t.Errorf("mail list wrote a control character at %d: %q", i, out)
	}

	var term bytes.Buffer
	if err := writeMessage(&term, []byte(raw), true); err != nil {
		t.Fatal(err)
	}
	wantBody := "\nHi \\x1b[31mAnn\\x1b[0m\nover\\rwrite \ufffd2J\n"
	if !strings.HasSuffix(term.String(), wantBody) || strings.ContainsAny(term.String(), "\x1b\r\u009b") {
		t.Errorf("mail show to a terminal: %q, want lines ending %q", term.String(), wantBody)
	}
	out, err = runCLI(t, "mail", "show", "1", "--dir", dir)
	if err != nil || out != raw {
		t.Errorf("mail show to a buffer: %v\n%q, want the message as received", err, out)
	}
}
