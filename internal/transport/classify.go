package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"regexp"
	"strconv"
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

// Classify says what err means for the broadcast. It returns the zero Class
// for a nil error and Channel for anything it does not recognise.
//
// The two possible mistakes are not equally bad, and every rule below leans
// the safe way:
//
//   - Calling a channel-wide failure Recipient records every remaining
//     address of the broadcast as failed, silently, one by one. So Recipient
//     needs positive evidence that the reply is about the one address: a
//     5xx reply code, given at RCPT or at the end of DATA (we send one
//     recipient per transaction, so a DATA reply that names a recipient
//     problem can only mean that recipient), an enhanced code in the
//     addressing or mailbox family (5.1.x, 5.2.x) or, without one, a reply
//     text that says the user or mailbox does not exist — and no word in
//     the text about the sender, policy, spam, reputation or relaying.
//   - Calling a recipient problem Channel only pauses the broadcast, with
//     the reply shown to the operator, who can resume it. That is the
//     fail-safe default for everything unrecognised.
//
// Transient and Quota both stop the page and retry later; Quota also tells
// the governor to back off from that provider (halve the learned ceiling,
// hold for a while). Quota is therefore kept for replies that say the
// provider is limiting our rate or volume, not for every deferral.
//
// A send whose connection failed after the final dot (MaybeDelivered) is
// Transient whatever the underlying error: the worker sees MaybeDelivered
// and keeps the claim in doubt instead of releasing it, and Transient makes
// sure it is never recorded as a failed recipient.
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
	f := newFacts(err)
	if g, ok := guide(&f); ok {
		return g.Class, g.Name
	}
	for _, r := range rules {
		if r.match(&f) {
			return r.class, r.name
		}
	}
	return Channel, "unrecognised (fail safe)"
}

// facts is what the rules look at, extracted once from the error.
type facts struct {
	err            error
	sendErr        bool   // err is or wraps a *SendError
	stage          string // "" when the error is not a SendError
	maybeDelivered bool
	refused        bool   // the transport refused the recipient before any command
	code           int    // SMTP reply code; 0: no reply
	enhanced       string // "5.1.1"; "" when absent or malformed
	class          int    // enhanced code parts; -1 when absent
	subject        int
	detail         int
	text           string // lowercased reply text, whitespace collapsed
}

func newFacts(err error) facts {
	f := facts{err: err, class: -1, subject: -1, detail: -1}
	var se *SendError
	var reply *smtp.SMTPError
	switch {
	case errors.As(err, &se):
		f.sendErr = true
		f.stage, f.maybeDelivered, f.refused = se.Stage, se.MaybeDelivered, se.Refused
		f.code, f.enhanced, f.text = se.Code, se.Enhanced, se.Text
		if f.code == 0 && errors.As(se.Err, &reply) {
			// A SendError built around a reply it did not unpack.
			f.code, f.text = reply.Code, reply.Message
			f.enhanced = enhancedString(reply.EnhancedCode)
		}
	case errors.As(err, &reply):
		f.code, f.text = reply.Code, reply.Message
		f.enhanced = enhancedString(reply.EnhancedCode)
	}
	f.class, f.subject, f.detail = parseEnhanced(f.enhanced)
	if f.class < 0 {
		f.enhanced = ""
	}
	f.text = strings.Join(strings.Fields(strings.ToLower(f.text)), " ")
	return f
}

// parseEnhanced splits an RFC 3463 code; all -1 when s is not one.
func parseEnhanced(s string) (class, subject, detail int) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return -1, -1, -1
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || v > 999 || p != strconv.Itoa(v) {
			return -1, -1, -1
		}
		n[i] = v
	}
	if n[0] != 2 && n[0] != 4 && n[0] != 5 {
		return -1, -1, -1
	}
	return n[0], n[1], n[2]
}

func (f *facts) replied() bool { return f.code != 0 }

// permanent: a 5xx reply, or a 4xx reply whose enhanced code says 5.x.x
// (Gmail sends "421 5.7.32 … blocked"); the stronger statement wins.
func (f *facts) permanent() bool {
	return f.code/100 == 5 || (f.code/100 == 4 && f.class == 5)
}

func (f *facts) temporary() bool { return f.code/100 == 4 && f.class != 5 }

func (f *facts) is(class, subject, detail int) bool {
	return f.class == class && f.subject == subject && f.detail == detail
}

// aboutRecipientStage: the reply came at RCPT, or at the end of DATA of a
// transaction that (in this system) always has exactly one recipient.
func (f *facts) aboutRecipientStage() bool { return f.stage == StageRcpt || f.stage == StageData }

// recipientCertain is the gate every Recipient verdict passes: a permanent
// 5xx reply at a recipient stage, no enhanced code that says otherwise,
// and nothing in the text that points at the sender or at policy.
func (f *facts) recipientCertain() bool {
	return f.code/100 == 5 && (f.class == -1 || f.class == 5) &&
		f.aboutRecipientStage() && !f.maybeDelivered && !reNotAboutRecipient.MatchString(f.text)
}

var (
	// Replies that are about us relaying, not about the address: our relay
	// refuses to carry mail to anyone outside its domains.
	reRelayDenied = regexp.MustCompile(`relay(ing)? (access )?(denied|disallowed|not permitted|not allowed|prohibited)|unable to relay|as a relay|open relay`)

	// The sending account is suspended or paused by the provider.
	reSuspended = regexp.MustCompile(`suspend|sending (is |has been )?(paused|disabled)|paused for this account|account (is |has been )?(paused|on hold)`)

	// Our own sending allowance at the provider (SES, Gmail relay, Office
	// 365 submission quotas): clearly ours, even when the enhanced code is
	// a mailbox one (Google answers "450 4.2.1 Peak SMTP relay limit
	// exceeded", Microsoft 365 "554 5.2.0 …SubmissionQuotaExceededException").
	reSenderQuota = regexp.MustCompile(`throttl|submission ?quota|sending (quota|limit|rate)|(daily|hourly)( user| message| smtp| relay| sending)* (quota|limit)|relay (sending )?limit|maximum sending rate`)

	// The recipient is receiving too much mail: about that one mailbox,
	// not about our rate, so it must not make the governor back off.
	reRecipientBusy = regexp.MustCompile(`receiving (e?mail|messages) (at a rate|too quickly)|user is receiving mail too quickly|recipient has exceeded|mailbox received too much|message receive limit|messages they can receive`)

	// The recipient's mailbox is full ("over quota" is the mailbox's quota
	// here, not ours).
	reMailboxFull = regexp.MustCompile(`mailbox (is )?full|mailbox (size limit|quota)|over ?quota|inbox is out of storage|exceeded storage allocation|quota exceeded \(mailbox|user quota exceeded`)

	// Reply texts that positively say the address does not exist or is
	// disabled, for replies without a specific enhanced code.
	reRecipientUnknown = regexp.MustCompile(`(user|mailbox|recipient|addressee|account|address) (is )?(unknown|not found|does not exist|doesn't exist|disabled|inactive|no longer valid|discontinued|unallocated)` +
		`|(unknown|invalid|no such) (user|recipient|mailbox|addressee)` +
		`|account that you tried to reach (does not exist|is disabled|is inactive)` +
		`|doesn't have an? [a-z0-9.-]+ account|is no longer valid|no mailbox here|not our customer` +
		`|(mailbox|account) (is|has been) (disabled|discontinued)|user does not exist`)

	// Words that make a reply unfit for a Recipient verdict whatever its
	// codes say: the server is talking about the sender, its IP, its
	// authentication, the content or a policy. GoDaddy, for one, rejects
	// an SPF failure with "550 5.1.0"; Exim's sender callout answers
	// "550-No Such User Here / 550 Sender verify failed". "Your account
	// is disabled" is about us, "this account is disabled" about them.
	reNotAboutRecipient = regexp.MustCompile(`your (account|api|ip|domain|server|mail server|sending|subscription|plan|credentials)|sender|\bspf\b|dkim|dmarc|spam|unsolicited|policy|blocked|block ?list|blacklist|reputation|relay(ing)? (access|denied|not|disallowed)|as a relay|open relay|authenticat|content|virus|malware|phish|abuse|prohibit|banned|not allowed|denied`)

	// A server limiting how many connections (or sessions) we hold open at
	// once: a limit on parallelism, not on how much we send.
	reConnLimit = regexp.MustCompile(`too many (concurrent |simultaneous |open )?(smtp )?(connections|sessions)|too many (concurrent|simultaneous)\b|maximum number of (concurrent |simultaneous )?(server )?(connections|sessions)|(concurrent|simultaneous) (server )?(connections?|sessions?) (limit|exceeded)|connection limit|concurrency limit`)

	// A limit counted over a period ("daily connection limit exceeded"):
	// volume, whatever it counts, so not reConnLimit's.
	rePerPeriod = regexp.MustCompile(`daily|hourly|per (day|hour|minute|second)|\btoday\b|this (hour|minute|day)`)

	// "Too many recipients", in any case (the transport reads the text
	// as the server wrote it).
	reTooManyRecipients = regexp.MustCompile(`(?i)too many recipients`)

	// A provider limiting our rate or volume, in its own words.
	reQuotaWords = regexp.MustCompile(`\brates?\b|rate[- ]?limit|\blimit(s|ed)?\b|quota|throttl|\bvolume\b|too many (messages|connections|recipients|mails|emails|concurrent|simultaneous|sessions|requests|deliveries)|maximum number of (concurrent )?connections|too frequent|temporarily deferred|deferred due to`)

	// Message too large, said without an enhanced code.
	reTooLarge = regexp.MustCompile(`message (size|is too (big|large))|too (big|large)|size limit|exceeds (the )?(maximum|fixed|allowed)[a-z ]{0,30}size`)
)

type rule struct {
	name  string
	class Class
	match func(*facts) bool
}

// rules are tried in order; the first match decides. Anything no rule
// recognises is Channel (fail safe). The order carries most of the
// decisions:
//
//   - in doubt first: nothing may turn a maybe-delivered send into a
//     recipient failure;
//   - channel-wide replies (authentication, relaying denied, a suspended
//     account) before anything per recipient, because they can arrive at
//     RCPT and in a recipient-looking code;
//   - our own quota in the provider's words before the mailbox rules,
//     because providers report it in mailbox codes (4.2.1, 5.2.0, 5.1.90);
//   - message size before the quota words ("exceeded … size limits");
//   - recipient rules before the generic quota words, because a full
//     mailbox says "quota" too, and after them a catch that keeps every
//     leftover 5.1.x/5.2.x off the Recipient path;
//   - x.7.x (policy) after the recipient rules and never Recipient itself.
var rules = []rule{
	// --- Outcome unknown -------------------------------------------------
	{"connection lost after the final dot (in doubt)", Transient, func(f *facts) bool { return f.maybeDelivered }},
	// The transport itself could not write this one address for this
	// server (SMTPUTF8 not offered, a domain with no A-label form): no
	// command was sent, and another address would have gone through.
	{"recipient refused by the transport before sending", Recipient, func(f *facts) bool {
		return f.refused && f.stage == StageRcpt && !f.replied()
	}},

	// --- No reply: network, TLS, DNS, lifecycle --------------------------
	{"deadline or cancellation", Transient, func(f *facts) bool {
		return !f.replied() && (errors.Is(f.err, context.DeadlineExceeded) || errors.Is(f.err, context.Canceled))
	}},
	// DNS before the generic timeout rule: the relay's name not existing
	// is a configuration error (wrong host in the URL) that no retry will
	// fix, while a resolver timeout or SERVFAIL is worth retrying.
	{"DNS temporary failure", Transient, func(f *facts) bool {
		var dns *net.DNSError
		return !f.replied() && errors.As(f.err, &dns) && (dns.IsTimeout || dns.IsTemporary)
	}},
	{"DNS lookup failed (not found, or not retryable)", Channel, func(f *facts) bool {
		var dns *net.DNSError
		return !f.replied() && errors.As(f.err, &dns)
	}},
	// Certificate verification failures are configuration (wrong host
	// name, private CA, expired certificate) or an interception; retrying
	// cannot fix either, and the operator must see them, so they halt.
	{"TLS certificate rejected", Channel, func(f *facts) bool {
		if f.replied() {
			return false
		}
		var ver *tls.CertificateVerificationError
		var ua x509.UnknownAuthorityError
		var host x509.HostnameError
		var inv x509.CertificateInvalidError
		return errors.As(f.err, &ver) || errors.As(f.err, &ua) || errors.As(f.err, &host) || errors.As(f.err, &inv)
	}},
	// The peer does not speak TLS at all (smtps:// pointed at a plaintext
	// port): configuration.
	{"peer is not speaking TLS", Channel, func(f *facts) bool {
		var rec tls.RecordHeaderError
		return !f.replied() && errors.As(f.err, &rec)
	}},
	{"network timeout", Transient, func(f *facts) bool {
		var ne net.Error
		return !f.replied() && errors.As(f.err, &ne) && ne.Timeout()
	}},
	{"connection refused, reset or closed", Transient, func(f *facts) bool {
		if f.replied() {
			return false
		}
		for _, target := range connectionErrors {
			if errors.Is(f.err, target) {
				return true
			}
		}
		return false
	}},
	// Any other TLS handshake failure (a peer alert, a handshake cut
	// short): the issue asks for these to be retried; a persistent one
	// still ends the broadcast as failed after the bounded resumptions.
	{"TLS handshake failure", Transient, func(f *facts) bool {
		return !f.replied() && inChain(f.err, func(e error) bool {
			if op, ok := e.(*net.OpError); ok && op.Op == "remote error" {
				return true
			}
			msg := e.Error()
			return strings.HasPrefix(msg, "tls: ") || strings.HasPrefix(msg, "remote error: tls: ")
		})
	}},
	// Send after Close: this worker is shutting down. The message was not
	// sent; another worker picks the page up. Pausing the broadcast for a
	// routine restart would be wrong.
	{"transport closed (worker shutting down)", Transient, func(f *facts) bool {
		return !f.replied() && errors.Is(f.err, ErrClosed)
	}},

	// --- Replies: the channel itself --------------------------------------
	{"authentication rejected (530/534/535/538)", Channel, func(f *facts) bool {
		switch f.code {
		case 530, 534, 535, 538:
			return true
		}
		return false
	}},
	// A relay that will not relay for us fails every address the same
	// way, even when it says so at RCPT or with a 4xx (Postfix's
	// defer_unauth_destination answers "454 4.7.1 … Relay access denied").
	{"relaying denied", Channel, func(f *facts) bool {
		return f.replied() && reRelayDenied.MatchString(f.text)
	}},
	{"sending account suspended or paused", Channel, func(f *facts) bool {
		return f.replied() && reSuspended.MatchString(f.text)
	}},
	{"our sending quota or rate (provider's words)", Quota, func(f *facts) bool {
		return (f.temporary() || f.permanent()) && reSenderQuota.MatchString(f.text)
	}},
	{"permanent failure during AUTH", Channel, func(f *facts) bool { return f.stage == StageAuth && f.permanent() }},
	// Logins being throttled ("454 4.7.0 Too many login attempts") is
	// about logins, not sending volume: retry, without lowering the
	// governor's ceiling.
	{"temporary failure during AUTH", Transient, func(f *facts) bool { return f.stage == StageAuth && f.temporary() }},

	// --- Replies: the message itself --------------------------------------
	// Every copy of a broadcast has (nearly) the same size, so a relay's
	// size rejection would repeat for every address: halt and show it
	// (one recipient's alone, at RCPT or DATA, is MaybeOneRecipient).
	{"message too large (5.3.4, 5.2.3)", Channel, func(f *facts) bool {
		return f.permanent() && (f.is(5, 3, 4) || f.is(5, 2, 3) ||
			(f.code == 552 && f.enhanced == "" && reTooLarge.MatchString(f.text)))
	}},

	// --- Replies: one recipient -------------------------------------------
	// A recipient receiving too much mail. A 4xx is retried later. A 5xx
	// (Gmail "550 5.2.1 … receiving mail at a rate", Microsoft "554
	// 5.2.122 … per hour") is final for this message and concerns only
	// this address: record it and continue, rather than let one busy
	// mailbox burn the broadcast's bounded resumptions.
	{"recipient receiving too fast (temporary)", Transient, func(f *facts) bool {
		return f.temporary() && reRecipientBusy.MatchString(f.text)
	}},
	{"recipient receiving too fast (permanent)", Recipient, func(f *facts) bool {
		return f.recipientCertain() && reRecipientBusy.MatchString(f.text)
	}},
	// Mailbox full. 4.2.2 is per recipient but temporary: retrying later
	// is safer than giving the address up. 5.2.2 is that one mailbox,
	// permanently: record and continue.
	{"mailbox full (temporary)", Transient, func(f *facts) bool {
		return f.temporary() && (f.is(4, 2, 2) || reMailboxFull.MatchString(f.text))
	}},
	{"mailbox full (permanent)", Recipient, func(f *facts) bool {
		return f.recipientCertain() && (f.is(5, 2, 2) || reMailboxFull.MatchString(f.text))
	}},
	// Bad destination address. Only the RFC 3463 details that are about
	// the destination address: 1 bad mailbox, 2 bad system, 3 bad syntax,
	// 4 ambiguous, 6 moved, 10 null MX (RFC 7505). Not 5.1.7/5.1.8
	// (sender), not 5.1.0 (other: GoDaddy's SPF rejection uses it), not
	// vendor codes such as Microsoft's 5.1.90 (our daily recipient limit).
	{"bad destination address (5.1.x)", Recipient, func(f *facts) bool {
		if !f.recipientCertain() || f.class != 5 || f.subject != 1 {
			return false
		}
		switch f.detail {
		case 1, 2, 3, 4, 6, 10:
			return true
		}
		return false
	}},
	{"mailbox disabled (5.2.1)", Recipient, func(f *facts) bool { return f.recipientCertain() && f.is(5, 2, 1) }},
	// Without a specific code, the text must say it. Only the "other"
	// enhanced codes may be refined by text: never 5.7.x (policy), 5.4.x
	// (routing: Microsoft's "5.4.1 Recipient address rejected: Access
	// denied"), 5.5.x (protocol: Outlook.com's "5.5.0 … mailbox
	// unavailable") — those stay Channel even when they probably mean a
	// dead address, because the same codes also carry tenant-wide or
	// reputation blocks.
	{"reply text says the address does not exist", Recipient, func(f *facts) bool {
		if !f.recipientCertain() || !reRecipientUnknown.MatchString(f.text) {
			return false
		}
		return f.class == -1 || (f.class == 5 && (f.subject == 0 || f.subject == 1 || f.subject == 2) &&
			!(f.subject == 1 && (f.detail == 7 || f.detail == 8)))
	}},

	// An addressing or mailbox code that did not pass the gates above: at
	// MAIL FROM it is about our sender ("553 5.1.8", "550 5.1.1 sender
	// unknown"); at RCPT or DATA the text pointed at policy or the sender,
	// or the detail is not one we know to be about the destination.
	{"addressing or mailbox status without recipient evidence", Channel, func(f *facts) bool {
		return f.permanent() && f.class == 5 && (f.subject == 1 || f.subject == 2)
	}},

	// --- Replies: too many connections -------------------------------------
	// "421 Too many concurrent connections", Office 365's "421 4.3.2 The
	// maximum number of concurrent connections has exceeded a limit": the
	// server limits how many connections we hold, not how much we send.
	// Quota would halve the sending domain's daily ceiling to half of what
	// was sent so far (a relay allowing 8 connections to a worker pool of
	// 32 stopped a broadcast at 129 messages until midnight); as a
	// deferral the breaker and its connection ramp bring the connections
	// down to what the server takes, and the recipients go out later.
	{"too many connections (a limit on parallelism, not volume)", Transient, func(f *facts) bool {
		return f.temporary() && reConnLimit.MatchString(f.text) && !rePerPeriod.MatchString(f.text)
	}},
	// "452 4.5.3 Too many recipients": we name one recipient per
	// transaction, so the count the server means is of its session (or of
	// a message it still thinks open), not a volume of ours. Quota halved
	// the domain's daily ceiling to half of what was sent so far and held
	// the broadcast to midnight; a relay answering it now and then made
	// every day end early (found by a tester). Deferred, the recipient
	// goes out on another connection (the transport drops this one,
	// sessionLimit). Said with a period ("today", "per hour") or with
	// words of rate, limit or quota ("452 4.5.3 Your message was rate
	// limited"), it is a volume: the quota rules below.
	// Only 4.5.3, or a bare 452: Postfix's client recipient rate limit
	// says "450 4.7.1 Error: too many recipients from [ip]", a rate.
	{"too many recipients in a session (not volume)", Transient, func(f *facts) bool {
		rest := reTooManyRecipients.ReplaceAllString(f.text, "")
		return f.temporary() && tooManyRecipients(f.code, f.enhanced, f.text) &&
			!rePerPeriod.MatchString(rest) && !reSenderQuota.MatchString(rest) && !reQuotaWords.MatchString(rest)
	}},

	// --- Replies: security and policy (x.7.x) -----------------------------
	// Most 5.7.x are about the sender, its IP, its authentication or the
	// content — channel-wide. Those that say rate, limit, quota, volume,
	// too many … are the provider limiting us: Quota.
	{"policy reply about our rate or volume", Quota, func(f *facts) bool {
		return f.subject == 7 && (f.temporary() || f.permanent()) && reQuotaWords.MatchString(f.text)
	}},
	// Microsoft documents 4.7.500–4.7.699 ("Server busy. Please try again
	// later", "Access denied, please try again later") as its throttling
	// of IPs under evaluation: back off.
	{"Microsoft IP throttling (4.7.500-699)", Quota, func(f *facts) bool {
		return f.temporary() && f.class == 4 && f.subject == 7 && f.detail >= 500 && f.detail <= 699
	}},
	{"temporary policy deferral (4.7.x)", Transient, func(f *facts) bool { return f.subject == 7 && f.temporary() }},
	{"policy rejection (5.7.x)", Channel, func(f *facts) bool { return f.subject == 7 && f.permanent() }},

	// --- Replies: everything else -----------------------------------------
	// "Too many recipients" with a period or a rate's code (not 4.5.3,
	// which the session rule above takes): a per-period limit, Quota.
	{"rate, limit or quota wording", Quota, func(f *facts) bool {
		return (f.temporary() || f.permanent()) && reQuotaWords.MatchString(f.text)
	}},
	{"temporary reply (4xx)", Transient, func(f *facts) bool { return f.temporary() }},
	// A 5xx at MAIL FROM is about the sender; at DATA about the content or
	// policy; at RCPT without recipient evidence, ambiguous. All halt.
	{"other permanent reply (5xx)", Channel, func(f *facts) bool { return f.permanent() }},
}

// connectionErrors are failures of the connection itself, worth retrying.
// Connection refused is included: a relay restarting refuses for a few
// seconds, and a wrong port still ends as a failed broadcast after the
// bounded resumptions, with the reason.
var connectionErrors = []error{
	io.EOF, io.ErrUnexpectedEOF, io.ErrClosedPipe, net.ErrClosed,
	syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
	syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN,
	syscall.EHOSTDOWN, syscall.EADDRNOTAVAIL,
}

// inChain reports whether ok holds for err or any error it wraps.
func inChain(err error, ok func(error) bool) bool {
	const maxDepth = 64
	var walk func(error, int) bool
	walk = func(e error, depth int) bool {
		if e == nil || depth > maxDepth {
			return false
		}
		if ok(e) {
			return true
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			return walk(u.Unwrap(), depth+1)
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				if walk(inner, depth+1) {
					return true
				}
			}
		}
		return false
	}
	return walk(err, 0)
}

// hardBounceCodes are the enhanced status codes (RFC 3463) that say the
// address itself is no good, for good: bad mailbox (5.1.1), bad domain
// (5.1.2), bad address syntax (5.1.3), mailbox moved with no forwarding
// (5.1.6), a domain that accepts no mail (5.1.10, null MX), a disabled
// mailbox (5.2.1). Policy refusals (5.7.x: spam, blocked sender) say
// nothing of the address and are not among them.
var hardBounceCodes = map[string]bool{"5.1.1": true, "5.1.2": true, "5.1.3": true, "5.1.6": true, "5.1.10": true, "5.2.1": true}

// hardBouncePhrases say the same in the reply text of servers that send no
// enhanced code ("550 No such user here", RFC 5321's own example).
var hardBouncePhrases = []string{"no such user", "user unknown", "unknown user", "recipient unknown", "unknown recipient", "does not exist", "no mailbox here"}

// tooManyRecipients is "452 4.5.3 Too many recipients" (or a bare 452
// saying so): a count of the session's recipients, RFC 3463's 4.5.3.
func tooManyRecipients(code int, enhanced, text string) bool {
	return enhanced == "4.5.3" || code == 452 && enhanced == "" && reTooManyRecipients.MatchString(text)
}

// reAboutSender is reply text that points at the sender, its host, its IP
// or its authentication: a refusal every recipient would meet, whatever
// stage it came at ("553 5.7.1 Sender address rejected: not owned by
// user" at RCPT, "550 5.7.1 Client host blocked using zen.spamhaus.org",
// SES's "Email address is not verified"), never one recipient's.
var reAboutSender = regexp.MustCompile(`sender|client host|\bip\b|your (account|api|ip|domain|server|mail server|sending|subscription|plan|credentials)|\bspf\b|dkim|dmarc|not verified|block ?list|blacklist|blocked using|spamhaus|reputation|relay|authenticat|\bhelo\b|\behlo\b|reverse dns|\bptr\b|\brdns\b`)

// Rules whose Channel verdict may yet be about one recipient: the reply
// came at RCPT or DATA and says policy, or something unrecognised, not
// one of the causes that are the channel's by nature (authentication,
// relaying, a suspended account, our quota, a fix a provider names). The
// message's size too: a relay's own limit refuses every copy, and halts at
// the first window as before, but a recipient's server with a smaller
// limit refuses that recipient alone, and halted the whole broadcast for
// one address, again after every resume (resume --fail-refused could not
// clear it: a tester's 10 such addresses were 10 halts).
var maybeOneRecipientRules = map[string]bool{
	"policy rejection (5.7.x)":                                true,
	"other permanent reply (5xx)":                             true,
	"addressing or mailbox status without recipient evidence": true,
	"message too large (5.3.4, 5.2.3)":                        true,
}

// MaybeOneRecipient reports a Channel refusal that a server may have given
// about one recipient alone: a permanent reply at RCPT or DATA by one of
// the policy or catch-all rules ("550 5.7.1 message rejected as spam" for
// one mailbox's filter, "554 5.7.1 recipient address rejected: access
// denied"). Classify still calls it Channel, the fail-safe verdict; the
// caller may treat it as the recipient's when it stays rare
// (pageworker's refusal tally).
func MaybeOneRecipient(err error) bool {
	f := newFacts(err)
	if !f.sendErr || !f.aboutRecipientStage() || !f.permanent() || f.maybeDelivered || reAboutSender.MatchString(f.text) {
		return false
	}
	c, rule := classify(err)
	return c == Channel && maybeOneRecipientRules[rule]
}

// AtTheServer reports a send that failed talking to the SMTP server itself,
// before any sender or recipient was named: at connect (TCP, TLS, greeting,
// EHLO, STARTTLS) or AUTH. This transport dials one server, the URL's,
// never a recipient's MX, so such a failure is that server's, whoever the
// recipient: it says nothing of the recipient's provider (its breaker, the
// governor's provider tallies).
func AtTheServer(err error) bool {
	var se *SendError
	return errors.As(err, &se) && (se.Stage == StageConnect || se.Stage == StageAuth)
}

// BeforeRecipient reports a send that failed before the recipient was
// named: at connect (TCP, TLS, greeting, EHLO, STARTTLS), AUTH or MAIL
// FROM, so that nothing of it says anything about the recipient. Such a
// failure is not charged to the recipient as an attempt:
//   - a broadcast's row deferred for it keeps its attempts (but for a
//     MAIL FROM refused while others of its window got through:
//     RefusedAtMailFrom); a relay's STARTTLS failing for a while
//     failed 47 recipients by their attempts, none of them ever refused (a
//     tester). A relay that never takes mail again still ends the broadcast:
//     its pages and sweeps reach nobody and count toward the coordinator's
//     no-progress rule.
//   - a transactional message is retried while the relay takes nothing for
//     a day (transactional.Schedule.Unreached), not failed after its six
//     attempts: a 43-minute outage failed every password reset queued at its
//     start (a tester).
func BeforeRecipient(err error) bool {
	var se *SendError
	if !errors.As(err, &se) || se.MaybeDelivered || se.Refused {
		return false
	}
	switch se.Stage {
	case StageConnect, StageAuth, StageMail:
		return true
	}
	return false
}

// RefusedAtMailFrom reports whether err is a refusal of MAIL FROM: the one
// refusal before the recipient is named that can be about the message
// itself (its SIZE or SMTPUTF8 parameter), where a refused connection, TLS
// or login is about the relay or its load.
func RefusedAtMailFrom(err error) bool {
	var se *SendError
	return errors.As(err, &se) && se.Stage == StageMail && !se.MaybeDelivered
}

// HardBounce reports whether err is a permanent refusal of the recipient's
// address itself at RCPT or DATA: the address should not be mailed again
// (a sender that keeps mailing dead addresses loses its reputation).
func HardBounce(err error) bool {
	var se *SendError
	if !errors.As(err, &se) || se.Code < 500 || se.Code > 599 || (se.Stage != StageRcpt && se.Stage != StageData) {
		return false
	}
	if hardBounceCodes[se.Enhanced] {
		return true
	}
	// A generic code (5.0.0, 5.1.0, 5.2.0, or none) says no more than
	// "refused": the reply text may say the address does not exist. Any
	// other code (5.7.x policy) decides without it.
	switch se.Enhanced {
	case "", "5.0.0", "5.1.0", "5.2.0":
	default:
		return false
	}
	text := strings.ToLower(se.Text)
	for _, p := range hardBouncePhrases {
		if strings.Contains(text, p) {
			return true
		}
	}
	return false
}
