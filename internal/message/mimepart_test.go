package message

import (
	"bytes"
	"mime/multipart"
	"mime/quotedprintable"
	"net/textproto"
	"strings"
	"testing"
	"time"
)

// The direct writers must produce what the standard library writers they
// replaced produce, byte for byte: messages already sent were built with
// those, and a re-render must match them.

func stdlibQP(src []byte) []byte {
	var b bytes.Buffer
	w := quotedprintable.NewWriter(&b)
	w.Write(src)
	w.Close()
	return b.Bytes()
}

func FuzzAppendQP(f *testing.F) {
	for _, s := range []string{
		"", "plain", "a=b", "trailing space \n", "tab\t\r\n", "bare\rcr", "\r=\n", "\r\r\n\n",
		strings.Repeat("x", 75) + "=", strings.Repeat("y", 74) + " \n", strings.Repeat("ü", 40),
		"\x00\x7f\xff", strings.Repeat("word ", 40),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		want := stdlibQP(src)
		if got := appendQP(nil, src); !bytes.Equal(got, want) {
			t.Fatalf("appendQP(%q)\n got %q\nwant %q", src, got, want)
		}
		// Appending must leave what is already in dst alone.
		if got := appendQP([]byte("head"), src); !bytes.Equal(got, append([]byte("head"), want...)) {
			t.Fatalf("appendQP with prefix(%q) = %q", src, got)
		}
	})
}

func TestAppendAlternativeMatchesMultipart(t *testing.T) {
	t.Parallel()
	const boundary = "=_rc.01J9ZQ7Y3M8B5N4K2H1G0F9E8D.01J9ZQ8A6C5D4E3F2G1H0J9K8M"
	text, html := []byte("Hi there,\n.\nbye =\n"), []byte("<p>Hi "+strings.Repeat("there ", 30)+"</p>")

	var want bytes.Buffer
	mw := multipart.NewWriter(&want)
	if err := mw.SetBoundary(boundary); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		ct   string
		body []byte
	}{{"text/plain; charset=utf-8", text}, {"text/html; charset=utf-8", html}} {
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", p.ct)
		h.Set("Content-Transfer-Encoding", "quoted-printable")
		pw, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		pw.Write(stdlibQP(p.body))
	}
	mw.Close()

	if got := appendAlternative(nil, boundary, text, html); !bytes.Equal(got, want.Bytes()) {
		t.Errorf("appendAlternative =\n%q\nwant\n%q", got, want.Bytes())
	}
}

func FuzzCheckBoundary(f *testing.F) {
	for _, s := range []string{"", "=_rc.tx.01J9ZQ7Y3M8B5N4K2H1G0F9E8D", "a b", "a ", "ü", "a\"b", strings.Repeat("x", 70), strings.Repeat("x", 71)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b string) {
		want := multipart.NewWriter(nil).SetBoundary(b)
		got := checkBoundary(b)
		if (got == nil) != (want == nil) || got != nil && got.Error() != want.Error() {
			t.Fatalf("checkBoundary(%q) = %v, SetBoundary says %v", b, got, want)
		}
	})
}

// multipart.Writer refused such boundaries; RenderTransactional still must.
func TestRenderTransactionalBadBoundary(t *testing.T) {
	t.Parallel()
	m := Transactional{FromAddress: "a@example.com", To: "b@example.org", Subject: "s", Text: "t", HTML: "<p>h</p>"}
	for _, id := range []string{"tx." + strings.Repeat("x", 70) + "@example.com", "tx.\"quoted\"@example.com"} {
		_, err := RenderTransactional(m, id, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		if err == nil || !strings.Contains(err.Error(), "boundary") {
			t.Errorf("Message-ID %q: error = %v, want a boundary error", id, err)
		}
	}
}
