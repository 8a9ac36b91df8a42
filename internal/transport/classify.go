package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"

	"github.com/emersion/go-smtp"
)

// Class is what a send error means for the rest of a broadcast.
// The zero value is not a class: Classify never returns it for a non-nil
// error, so an unset Class can never be mistaken for "skip this address".
type Class int

const (
	// Recipient: this one address is bad; record it and continue.
	Recipient Class = iota + 1
	// Transient: try again later (4xx, timeouts, dropped connections).
	Transient
	// Quota: the server is limiting us; slow down before retrying.
	Quota
	// Channel: the channel itself is broken (auth, sender rejected, or an
	// error nobody recognised); stop the broadcast and show the error.
	Channel
)

func (c Class) String() string {
	switch c {
	case Recipient:
		return "recipient"
	case Transient:
		return "transient"
	case Quota:
		return "quota"
	case Channel:
		return "channel"
	}
	return "none"
}

// facts is what the rules look at, extracted once from the error.
type facts struct {
	err      error
	stage    string // "" when the error is not a SendError
	code     int    // 0: no reply
	enhanced string // "" when the reply had none
	text     string // lowercased reply text
}

func (f facts) replied() bool                { return f.code != 0 }
func (f facts) codeClass() int               { return f.code / 100 }
func (f facts) enhancedPrefix(p string) bool { return strings.HasPrefix(f.enhanced, p) }

type rule struct {
	name  string
	class Class
	match func(facts) bool
}

var (
	reUnknownMailbox = regexp.MustCompile(`mailbox|user unknown|unknown user|no such user|does not exist|doesn't exist|recipient unknown|unknown recipient`)
	reRateLimit      = regexp.MustCompile(`rate|limit|quota|too many|throttl`)
	reTooLarge       = regexp.MustCompile(`too (large|big)|size`)
)

// rules are tried in order; the first match decides. Order matters:
// authentication failures carry x.7.x codes but must halt, not throttle;
// a bad mailbox wins over rate words in its text; Quota is checked before
// the generic 4xx rule because a 421 "rate limited" needs backing off, not
// an immediate retry. Anything no rule recognises is Channel (fail safe).
var rules = []rule{
	{"authentication rejected (530/534/535/538)", Channel, func(f facts) bool {
		switch f.code {
		case 530, 534, 535, 538:
			return true
		}
		return false
	}},
	{"permanent failure during AUTH", Channel, func(f facts) bool { return f.stage == StageAuth && f.codeClass() == 5 }},
	{"temporary failure during AUTH", Transient, func(f facts) bool { return f.stage == StageAuth && f.codeClass() == 4 }},
	{"bad destination mailbox (5.1.x at RCPT)", Recipient, func(f facts) bool {
		// 5.1.7 and 5.1.8 are about our sender address, not the recipient.
		return f.stage == StageRcpt && f.codeClass() == 5 && f.enhancedPrefix("5.1.") &&
			f.enhanced != "5.1.7" && f.enhanced != "5.1.8"
	}},
	{"unknown mailbox text at RCPT (550/551/553, no specific enhanced code)", Recipient, func(f facts) bool {
		switch f.code {
		case 550, 551, 553:
		default:
			return false
		}
		return f.stage == StageRcpt && (f.enhanced == "" || f.enhanced == "5.0.0") && reUnknownMailbox.MatchString(f.text)
	}},
	{"message too large (5.3.4)", Channel, func(f facts) bool {
		return f.enhanced == "5.3.4" || (f.code == 552 && f.enhanced == "" && reTooLarge.MatchString(f.text))
	}},
	{"policy or rate status (x.7.x)", Quota, func(f facts) bool {
		return (f.codeClass() == 4 || f.codeClass() == 5) && (f.enhancedPrefix("4.7.") || f.enhancedPrefix("5.7."))
	}},
	{"rate/limit/quota wording", Quota, func(f facts) bool {
		return (f.codeClass() == 4 || f.codeClass() == 5) && reRateLimit.MatchString(f.text)
	}},
	{"temporary reply (4xx)", Transient, func(f facts) bool { return f.codeClass() == 4 }},
	{"timeout or cancellation", Transient, func(f facts) bool {
		if f.replied() {
			return false
		}
		var ne net.Error
		return errors.Is(f.err, context.DeadlineExceeded) || errors.Is(f.err, context.Canceled) ||
			(errors.As(f.err, &ne) && ne.Timeout())
	}},
	{"host name does not resolve", Channel, func(f facts) bool {
		var dns *net.DNSError
		return !f.replied() && errors.As(f.err, &dns) && dns.IsNotFound
	}},
	{"TLS certificate or protocol mismatch", Channel, func(f facts) bool {
		var cert *tls.CertificateVerificationError
		var rec tls.RecordHeaderError
		return !f.replied() && (errors.As(f.err, &cert) || errors.As(f.err, &rec))
	}},
	{"connection refused, reset or closed", Transient, func(f facts) bool {
		if f.replied() {
			return false
		}
		var op *net.OpError
		return errors.Is(f.err, io.EOF) || errors.Is(f.err, io.ErrUnexpectedEOF) ||
			errors.Is(f.err, syscall.ECONNREFUSED) || errors.Is(f.err, syscall.ECONNRESET) ||
			errors.Is(f.err, syscall.ECONNABORTED) || errors.Is(f.err, syscall.EPIPE) ||
			errors.Is(f.err, net.ErrClosed) || errors.As(f.err, &op)
	}},
	{"other permanent reply (5xx)", Channel, func(f facts) bool { return f.codeClass() == 5 }},
}

// Classify says what err means for the broadcast. It returns the zero Class
// for a nil error and Channel for anything it does not recognise.
func Classify(err error) Class {
	c, _ := classify(err)
	return c
}

// classify also returns the name of the deciding rule, for tests and for
// explaining a decision in logs.
func classify(err error) (Class, string) {
	if err == nil {
		return 0, ""
	}
	f := facts{err: err}
	var se *SendError
	var reply *smtp.SMTPError
	switch {
	case errors.As(err, &se):
		f.stage, f.code, f.enhanced, f.text = se.Stage, se.Code, se.Enhanced, strings.ToLower(se.Text)
	case errors.As(err, &reply):
		f.code, f.text = reply.Code, strings.ToLower(reply.Message)
		f.enhanced = enhancedString(reply.EnhancedCode)
	}
	for _, r := range rules {
		if r.match(f) {
			return r.class, r.name
		}
	}
	return Channel, "unrecognised"
}
