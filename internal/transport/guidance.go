package transport

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Guidance is what a receiving provider documents about one of its replies:
// what it means for the broadcast (its Class, which overrides the generic
// rules), and for a pause the provider asks for, how long to stay away and
// how to come back. Each entry names its source.
type Guidance struct {
	Name string
	// Code is the reply code (0: any); Enhanced the RFC 3463 code, which
	// must match; Text, when set, must match the reply text (lowercased,
	// whitespace collapsed).
	Code     int
	Enhanced string
	Text     *regexp.Regexp
	Class    Class
	// Hold is how long the provider must be left alone (0: the governor's
	// ordinary handling of the class). Linear: come back on one connection
	// and add one at a time.
	Hold   time.Duration
	Linear bool
	// Fix says what the operator must change, for channel errors: the
	// broadcast halts with it beside the reply.
	Fix    string
	Source string
}

// Sources of the guidance table.
const (
	srcGmail     = "https://support.google.com/a/answer/3726730 (Gmail SMTP errors and codes)"
	srcGmailBulk = "https://support.google.com/a/answer/81126 (Email sender guidelines: rate limits, authentication, PTR, TLS)"
	srcYahoo     = "https://senders.yahooinc.com/smtp-error-codes/ (Yahoo Sender Hub, SMTP error codes)"
	srcMicrosoft = "https://learn.microsoft.com/en-us/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/non-delivery-reports-in-exchange-online"
	srcOutlookHV = "https://techcommunity.microsoft.com/blog/microsoftdefenderforoffice365blog/strengthening-email-ecosystem-outlook%E2%80%99s-new-requirements-for-high%E2%80%90volume-senders/4399730"
)

const gmailAuthFix = "authenticate the sending domain: publish SPF and sign with DKIM (rangecast domains records DOMAIN shows what to publish)"

// guidance is tried before the generic rules, after the in-doubt rule: a
// connection lost after the final dot stays in doubt whatever was said.
var guidance = []Guidance{
	// ------------------------------------------------------------- Gmail
	// "421 4.7.28 … has been temporarily rate limited": Gmail's rate limit
	// on an IP, SPF, DKIM or URL domain. Gmail's guidelines ask bulk
	// senders to slow down and come back gradually; we stop the provider
	// for 10 minutes, then resume on one connection and add one at a time.
	{Name: "gmail 421 4.7.28 rate limited", Code: 421, Enhanced: "4.7.28", Class: Quota,
		Hold: 10 * time.Minute, Linear: true, Source: srcGmail + "; " + srcGmailBulk},
	// Authentication, PTR and TLS: no retry fixes them, the operator must.
	{Name: "gmail 4.7.23/5.7.25 no PTR record", Enhanced: "4.7.23", Class: Channel,
		Fix: "give the sending IP a PTR record whose name resolves back to it", Source: srcGmail},
	{Name: "gmail 5.7.25 no PTR record", Enhanced: "5.7.25", Class: Channel,
		Fix: "give the sending IP a PTR record whose name resolves back to it", Source: srcGmail},
	{Name: "gmail 4.7.26 unauthenticated sender", Enhanced: "4.7.26", Class: Channel, Fix: gmailAuthFix, Source: srcGmail},
	{Name: "gmail 5.7.26 unauthenticated sender", Enhanced: "5.7.26", Class: Channel, Fix: gmailAuthFix, Source: srcGmail},
	{Name: "gmail 4.7.27 SPF did not pass", Enhanced: "4.7.27", Class: Channel,
		Fix: "fix the sending domain's SPF record so the sending IP passes", Source: srcGmail},
	{Name: "gmail 5.7.27 SPF did not pass", Enhanced: "5.7.27", Class: Channel,
		Fix: "fix the sending domain's SPF record so the sending IP passes", Source: srcGmail},
	{Name: "gmail 4.7.29 not sent over TLS", Enhanced: "4.7.29", Class: Channel,
		Fix: "send over TLS: use a smtps:// or STARTTLS relay URL", Source: srcGmail},
	{Name: "gmail 5.7.29 not sent over TLS", Enhanced: "5.7.29", Class: Channel,
		Fix: "send over TLS: use a smtps:// or STARTTLS relay URL", Source: srcGmail},
	{Name: "gmail 4.7.30 DKIM did not pass", Enhanced: "4.7.30", Class: Channel,
		Fix: "sign with DKIM for the From domain (rangecast domains records DOMAIN)", Source: srcGmail},
	{Name: "gmail 5.7.30 DKIM did not pass", Enhanced: "5.7.30", Class: Channel,
		Fix: "sign with DKIM for the From domain (rangecast domains records DOMAIN)", Source: srcGmail},
	{Name: "gmail 4.7.32 DMARC alignment", Enhanced: "4.7.32", Class: Channel,
		Fix: "align SPF or DKIM with the From domain and publish DMARC", Source: srcGmail},
	{Name: "gmail 5.7.32 DMARC alignment", Enhanced: "5.7.32", Class: Channel,
		Fix: "align SPF or DKIM with the From domain and publish DMARC", Source: srcGmail},
	{Name: "gmail 421 4.7.0 fails authentication checks", Code: 421, Enhanced: "4.7.0", Class: Channel,
		Text: regexp.MustCompile(`authentication (information|checks)`), Fix: gmailAuthFix, Source: srcGmail},

	// ------------------------------------------------------------- Yahoo
	// [TSS04] and [TS03]: deferrals for volume or complaints. Retried like
	// any deferral: the share breaker slows the provider if they pile up.
	{Name: "yahoo 421 4.7.0 [TSS04]/[TS03] deferred", Code: 421, Enhanced: "4.7.0", Class: Transient,
		Text: regexp.MustCompile(`\[(tss04|ts03)\]`), Source: srcYahoo},

	// --------------------------------------------------------- Microsoft
	// 4.7.650: rate limited for the IP's reputation; a deferral.
	{Name: "microsoft 451 4.7.650 deferred (IP reputation)", Code: 451, Enhanced: "4.7.650", Class: Transient, Source: srcMicrosoft},
	// 5.7.515: Outlook.com's requirements for high-volume senders. The fix
	// names what the reply says is missing.
	{Name: "microsoft 550 5.7.515 authentication level", Enhanced: "5.7.515", Class: Channel, Source: srcOutlookHV},
}

// Guide returns the provider guidance that decides err, if any.
func Guide(err error) (Guidance, bool) {
	if err == nil {
		return Guidance{}, false
	}
	f := newFacts(err)
	return guide(&f)
}

func guide(f *facts) (Guidance, bool) {
	if f.maybeDelivered || !f.replied() || f.enhanced == "" {
		return Guidance{}, false
	}
	for _, g := range guidance {
		if g.Enhanced != f.enhanced || (g.Code != 0 && g.Code != f.code) || (g.Text != nil && !g.Text.MatchString(f.text)) {
			continue
		}
		if g.Enhanced == "5.7.515" {
			g.Fix = microsoftAuthFix(f.text)
		}
		return g, true
	}
	return Guidance{}, false
}

// microsoftAuthFix names the authentication Outlook.com says is missing:
// the mechanisms its reply names, or all three when it names none.
func microsoftAuthFix(text string) string {
	var missing []string
	for _, m := range []string{"spf", "dkim", "dmarc"} {
		if strings.Contains(text, m) {
			missing = append(missing, strings.ToUpper(m))
		}
	}
	if len(missing) == 0 {
		missing = []string{"SPF", "DKIM", "DMARC"}
	}
	return "Outlook.com requires " + strings.Join(missing, ", ") + " to pass, with DMARC aligned to the From domain (rangecast domains records DOMAIN shows what to publish)"
}

// Explain is err's text with, when a provider's guidance covers it, what to
// do about it: the halt reason an operator reads.
func Explain(err error) string {
	if err == nil {
		return ""
	}
	if g, ok := Guide(err); ok && g.Fix != "" {
		return err.Error() + " — to fix: " + g.Fix
	}
	return err.Error()
}

// Reply is a refusal's short form for status lines, "451 4.3.0" or "421
// 4.7.0 [TSS04]", or "" when err carries no SMTP reply.
func Reply(err error) string {
	if err == nil {
		return ""
	}
	f := newFacts(err)
	if !f.replied() {
		return ""
	}
	s := strconv.Itoa(f.code)
	if f.enhanced != "" {
		s += " " + f.enhanced
	}
	if tag := reTag.FindString(f.text); tag != "" {
		s += " " + strings.ToUpper(tag)
	}
	return s
}

// reTag finds a provider's bracketed reason code ("[TSS04]", "[BL21]").
var reTag = regexp.MustCompile(`\[[a-z]{2,4}[0-9]{2}\]`)
