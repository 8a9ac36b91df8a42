package cli

import (
	"bytes"
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
