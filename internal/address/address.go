// Package address decides what a recipient address is: whether it can ever
// be delivered, its one canonical spelling, and the key that says two
// spellings are the same mailbox. Every place that stores, looks up or sends
// to an address goes through it, so an import, an unsubscribe, a webhook and
// a transport never disagree about who someone is.
//
// The key is computed here, in Go, and stored; no database folds case,
// because Postgres's lower() under the C locale (CloudNativePG's default)
// folds ASCII only and SQLite's always does.
package address

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/text/unicode/norm"
)

// Limits from RFC 5321 4.5.3.1.
const (
	MaxLen      = 254
	maxLocalLen = 64
)

// Reason says, as a value, why an address was refused; decisions and tests
// read it, people read Error.
type Reason string

const (
	ReasonEmpty       Reason = "empty"
	ReasonTooLong     Reason = "too long"
	ReasonEncoding    Reason = "invalid UTF-8"
	ReasonControl     Reason = "control or invisible character"
	ReasonSyntax      Reason = "not an address"
	ReasonIPLiteral   Reason = "IP literal"
	ReasonHost        Reason = "not a host name"
	ReasonPercentHack Reason = "percent routing"
	ReasonQuoted      Reason = "quoted local part"
)

// Error is a refused address.
type Error struct {
	Reason Reason
	Detail string // for people: what exactly is wrong
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return "email: " + string(e.Reason)
	}
	return e.Detail
}

// ErrInvalid matches every *Error with errors.Is.
var ErrInvalid = errors.New("address: invalid")

func (e *Error) Is(target error) bool { return target == ErrInvalid }

func refuse(r Reason, format string, args ...any) error {
	return &Error{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// domains maps and checks a domain for lookup: STD3 rules (letters, digits,
// hyphens; no leading or trailing hyphen), label and name lengths, bidi and
// joiner rules. Its ToASCII gives the A-labels a transport sends.
var domains = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.VerifyDNSLength(true),
	idna.StrictDomainName(true),
	idna.CheckHyphens(true),
	idna.CheckJoiners(true),
	idna.Transitional(false),
)

// Canonical returns s in its canonical form: NFC, with the domain in
// lowercase Unicode (U-labels), the local part as written. It refuses what
// can never be delivered: IP literals, domains that are not host names,
// control and invisible characters, percent routing, quoted local parts.
// Errors are *Error. Canonical is idempotent.
func Canonical(s string) (string, error) {
	local, domain, err := parse(s)
	if err != nil {
		return "", err
	}
	return local + "@" + domain, nil
}

// Key is the identity of an address: the canonical form, case-folded. Two
// addresses are the same contact exactly when their keys are equal. For
// input Canonical refuses, Key still returns a stable fold (NFC, lowercase)
// so a lookup by such a string simply finds nothing.
func Key(s string) string {
	if c, err := Canonical(s); err == nil {
		s = c
	}
	return fold(s)
}

func fold(s string) string {
	// Lowercasing can leave a string that is not NFC (and NFC can change
	// what lowercasing gives), so normalise on both sides: the result is a
	// fixed point of the whole function.
	return norm.NFC.String(strings.ToLower(norm.NFC.String(s)))
}

// ASCIIDomain returns the address with its domain as IDNA A-labels, the
// form an SMTP server without SMTPUTF8 accepts, and whether the local part
// still needs SMTPUTF8 (it is not ASCII).
func ASCIIDomain(addr string) (out string, utf8Local bool, err error) {
	at := strings.LastIndexByte(addr, '@')
	if at <= 0 {
		return "", false, refuse(ReasonSyntax, "%q has no local part and domain", addr)
	}
	local, domain := addr[:at], addr[at+1:]
	ascii, err := toASCII(domain)
	if err != nil {
		return "", false, refuse(ReasonHost, "domain %q cannot be written as IDNA A-labels", domain)
	}
	return local + "@" + ascii, !isASCII(local), nil
}

// toASCII is domains.ToASCII, without running the profile for a plain
// domain.
func toASCII(domain string) (string, error) {
	if plainDomain(domain) {
		return strings.ToLower(domain), nil
	}
	return domains.ToASCII(domain)
}

// plainDomain reports whether domain is an ASCII host name that the
// domains profile leaves as it is but for case: labels of 1 to 63 letters,
// digits and hyphens, none starting or ending with a hyphen or holding one
// in its third and fourth bytes (where "xn--" marks an A-label), at most
// 253 bytes in all. For such a name ToASCII and ToUnicode both give it in
// lowercase, and a send checks the recipient's domain three times (render,
// header, envelope): the profile was a tenth of a page worker's CPU.
// TestPlainDomainIsIDNA holds it to the profile.
func plainDomain(domain string) bool {
	if len(domain) == 0 || len(domain) > 253 {
		return false
	}
	start := 0
	for i := 0; i <= len(domain); i++ {
		if i < len(domain) && domain[i] != '.' {
			c := domain[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
			continue
		}
		label := domain[start:i]
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' ||
			len(label) >= 4 && label[2] == '-' && label[3] == '-' {
			return false
		}
		start = i + 1
	}
	return true
}

func parse(s string) (local, domain string, err error) {
	if s == "" {
		return "", "", refuse(ReasonEmpty, "email is empty")
	}
	if !utf8.ValidString(s) {
		return "", "", refuse(ReasonEncoding, "email is not valid UTF-8")
	}
	if r, i, ok := invisible(s); ok {
		what := fmt.Sprintf("%U (a control, space or invisible character)", r)
		switch r {
		case '\r', '\n':
			what = "a line break"
		case 0:
			what = "a NUL byte"
		}
		return "", "", refuse(ReasonControl, "email contains %s at byte %d; it is not a valid email address", what, i)
	}
	s = norm.NFC.String(s)
	if len(s) > MaxLen {
		return "", "", refuse(ReasonTooLong, "email is %d characters; at most %d are allowed", len(s), MaxLen)
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return "", "", refuse(ReasonSyntax, "%q is not a valid email address", s)
	}
	local, domain = s[:at], s[at+1:]
	if err := checkLocal(s, local); err != nil {
		return "", "", err
	}
	domain, err = checkDomain(s, domain)
	if err != nil {
		return "", "", err
	}
	return local, domain, nil
}

// invisible finds the first rune that has no business in an address: C0/C1
// controls, any space (NBSP included), format characters (zero-width space,
// joiners, BOM, bidi controls), line and paragraph separators, and private
// use or unassigned code points.
func invisible(s string) (rune, int, bool) {
	for i, r := range s {
		switch {
		case r < 0x21 || r == 0x7f:
			return r, i, true
		case r < 0x80:
			continue
		case unicode.IsControl(r), unicode.IsSpace(r), unicode.In(r, unicode.Cf, unicode.Zs, unicode.Zl, unicode.Zp, unicode.Co, unicode.Cs),
			!unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S):
			return r, i, true
		}
	}
	return 0, 0, false
}

// atext is RFC 5322's atext without '%' (percent routing, "a%b@relay",
// asks the relay to forward: never a mailbox of its own).
const atext = "!#$&'*+-/=?^_`{|}~"

func checkLocal(addr, local string) error {
	switch {
	case local == "":
		return refuse(ReasonSyntax, "%q has nothing before the @", addr)
	case len(local) > maxLocalLen:
		return refuse(ReasonTooLong, "the part before the @ is %d bytes; at most %d are allowed", len(local), maxLocalLen)
	case strings.HasPrefix(local, `"`):
		return refuse(ReasonQuoted, "%q has a quoted local part, which providers do not deliver", addr)
	case strings.Contains(local, "%"):
		return refuse(ReasonPercentHack, "%q uses percent routing ('%%' before the @)", addr)
	case local[0] == '.' || local[len(local)-1] == '.' || strings.Contains(local, ".."):
		return refuse(ReasonSyntax, "%q has a dot at the start or end of the local part, or two in a row", addr)
	}
	for _, r := range local {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' ||
			strings.ContainsRune(atext, r) || r >= 0x80 // RFC 6531 UTF8-non-ascii
		if !ok {
			return refuse(ReasonSyntax, "%q has %q in the local part", addr, r)
		}
	}
	return nil
}

// checkDomain returns the domain's canonical form: lowercase U-labels.
func checkDomain(addr, domain string) (string, error) {
	if domain == "" {
		return "", refuse(ReasonSyntax, "%q has nothing after the @", addr)
	}
	if strings.HasPrefix(domain, "[") {
		return "", refuse(ReasonIPLiteral, "%q is addressed to an IP literal, not a domain", addr)
	}
	ascii, err := toASCII(domain)
	if err != nil {
		return "", refuse(ReasonHost, "%q: %q is not a host name", addr, domain)
	}
	ascii = strings.ToLower(ascii)
	labels := strings.Split(ascii, ".")
	if len(labels) < 2 {
		return "", refuse(ReasonHost, "%q: %q is not a fully qualified domain (it has no dot)", addr, domain)
	}
	if allDigits(labels[len(labels)-1]) {
		return "", refuse(ReasonIPLiteral, "%q: %q is an IP address or ends in a numeric label", addr, domain)
	}
	for _, l := range labels {
		if l == "" {
			return "", refuse(ReasonHost, "%q: %q has an empty label", addr, domain)
		}
	}
	if plainDomain(ascii) {
		return ascii, nil // its own U-label form
	}
	uni, err := domains.ToUnicode(ascii)
	if err != nil {
		return "", refuse(ReasonHost, "%q: %q is not a host name", addr, domain)
	}
	return norm.NFC.String(uni), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
