package transport

import (
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

// TestGuidanceTable: every entry of the providers' guidance has a source,
// is reached by a reply of its own, and holds only what it may: a hold only
// for a quota, a fix only for a channel error.
func TestGuidanceTable(t *testing.T) {
	t.Parallel()
	for _, g := range guidance {
		if g.Source == "" || !strings.HasPrefix(g.Source, "https://") {
			t.Errorf("%s: no source", g.Name)
		}
		if g.Hold > 0 && g.Class != Quota {
			t.Errorf("%s: a hold on a %s reply", g.Name, g.Class)
		}
		if g.Class == Channel && g.Fix == "" && g.Enhanced != "5.7.515" {
			t.Errorf("%s: a channel error without a fix for the operator", g.Name)
		}
		code := g.Code
		if code == 0 {
			code = 550
			if g.Enhanced[0] == '4' {
				code = 421
			}
		}
		text := "refused"
		if g.Text != nil {
			text = map[bool]string{true: "[TSS04] deferred", false: "fails to pass authentication checks"}[strings.HasPrefix(g.Name, "yahoo")]
		}
		err := &SendError{Stage: StageData, Code: code, Enhanced: g.Enhanced, Text: text}
		got, ok := Guide(err)
		if !ok || got.Name != g.Name {
			t.Errorf("%s: a %d %s reply is guided by %q (%v)", g.Name, code, g.Enhanced, got.Name, ok)
		}
		if c, rule := classify(err); c != g.Class || rule != g.Name {
			t.Errorf("%s: classified %s by %q; want %s by the guidance", g.Name, c, rule, g.Class)
		}
	}
}

func TestGuidance(t *testing.T) {
	t.Parallel()
	reply := func(code int, enh smtp.EnhancedCode, text string) error {
		return &SendError{Stage: StageData, Err: &smtp.SMTPError{Code: code, EnhancedCode: enh, Message: text}}
	}
	gmail := reply(421, smtp.EnhancedCode{4, 7, 28}, "Our system has detected an unusual rate of unsolicited mail originating from your IP address. - gsmtp")
	g, ok := Guide(gmail)
	if !ok || g.Class != Quota || g.Hold < 10*time.Minute || !g.Linear {
		t.Fatalf("gmail 421 4.7.28: %+v, %v; want a quota hold of at least 10 minutes, ramped one connection at a time", g, ok)
	}
	if Reply(gmail) != "421 4.7.28" {
		t.Fatalf("Reply = %q", Reply(gmail))
	}
	yahoo := reply(421, smtp.EnhancedCode{4, 7, 0}, "[TSS04] Messages from 192.0.2.25 temporarily deferred due to user complaints")
	if Classify(yahoo) != Transient || Reply(yahoo) != "421 4.7.0 [TSS04]" {
		t.Fatalf("yahoo [TSS04]: %s, reply %q", Classify(yahoo), Reply(yahoo))
	}
	// Microsoft's 5.7.515 names what is missing: what the reply names, or
	// all three.
	for text, want := range map[string]string{
		"Access denied, sending domain example.com does not meet the required authentication level.":                    "SPF, DKIM, DMARC",
		"Access denied, sending domain example.com does not meet the required authentication level: DKIM did not pass.": "requires DKIM to pass",
	} {
		err := reply(550, smtp.EnhancedCode{5, 7, 515}, text)
		if Classify(err) != Channel || !strings.Contains(Explain(err), want) {
			t.Errorf("5.7.515 %q: %s, %q; want channel naming %q", text, Classify(err), Explain(err), want)
		}
	}
	// In doubt stays in doubt, whatever the provider said.
	if Classify(&SendError{Stage: StageData, MaybeDelivered: true, Code: 421, Enhanced: "4.7.28"}) != Transient {
		t.Fatal("a maybe-delivered 4.7.28 must stay transient (in doubt)")
	}
	// Without a reply there is no short form.
	if Reply(ErrClosed) != "" {
		t.Fatalf("Reply(ErrClosed) = %q", Reply(ErrClosed))
	}
}
