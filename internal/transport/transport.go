// Package transport hands rendered messages to a mail server. It reports
// exactly what the server said (reply code, enhanced code, stage) so the
// caller can tell one bad address from a channel-wide failure, and it says
// when a failure leaves the outcome unknown, because an exactly-once sender
// must not blindly retry a message the server may already have accepted.
package transport

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/rangecast/rangecast/internal/message"
)

// Transport delivers one rendered message. A returned error is a *SendError
// when the server replied or the exchange failed at a known stage. On
// success reply is the server's answer to the end of the message, e.g.
// "250 2.0.0 Ok: queued as 4F2A1C": it often names the server's queue id,
// which is what an operator quotes to the relay's support.
type Transport interface {
	Send(ctx context.Context, m message.Rendered) (reply string, err error)
	Close() error
}

// Stages of an SMTP exchange, as recorded in SendError.Stage.
const (
	StageConnect = "connect" // TCP, TLS, greeting, EHLO, STARTTLS
	StageAuth    = "auth"
	StageMail    = "mail"
	StageRcpt    = "rcpt"
	StageData    = "data" // DATA command, body, and the reply to the final dot
)

// ErrClosed is returned by Send after Close.
var ErrClosed = errors.New("transport: closed")

// SendError describes a failed delivery attempt.
type SendError struct {
	Code     int    // SMTP reply code; 0 when the server did not reply
	Enhanced string // RFC 3463 enhanced status code, e.g. "5.1.1"; "" if none
	Text     string // reply text (without the codes)
	Stage    string // one of the Stage constants
	Err      error  // underlying error when there was no reply (network, TLS, context)

	// MaybeDelivered is true when the connection failed after the end of
	// the message was sent but before the server's reply was read. The
	// server may have queued the message; resending it could deliver a
	// second copy, so the caller should treat the outcome as in doubt
	// rather than as a plain retryable failure.
	MaybeDelivered bool

	// Refused is true when the transport itself refused this recipient
	// before sending a command (an address it cannot encode, a local part
	// that needs SMTPUTF8 from a server that does not offer it). Nothing
	// reached the server, and the reason is the one address: Classify
	// calls it Recipient.
	Refused bool

	// local: the transport refused our own credentials setting before
	// sending them (no TLS, no AUTH offered, no mechanism in common), as
	// every connection to that relay would.
	local bool
}

// reLocalEndpoint is a network error's local end ("read tcp
// 127.0.0.1:51180->127.0.0.1:25"): its port is new on every connection, so
// one cause read as a different reason on every row (a tester's 44
// distinct reasons for one timeout), and the reasons could not be grouped.
var reLocalEndpoint = regexp.MustCompile(`\b(tcp[46]?|udp[46]?) \S+->`)

// withoutLocalPort drops a network error's local end, keeping the server's.
func withoutLocalPort(s string) string { return reLocalEndpoint.ReplaceAllString(s, "$1 to ") }

func (e *SendError) Error() string {
	var s string
	switch {
	case e.Code != 0 && e.Enhanced != "":
		s = fmt.Sprintf("smtp %s: %d %s %s", e.Stage, e.Code, e.Enhanced, e.Text)
	case e.Code != 0:
		s = fmt.Sprintf("smtp %s: %d %s", e.Stage, e.Code, e.Text)
	case e.Err != nil:
		s = fmt.Sprintf("smtp %s: %s", e.Stage, withoutLocalPort(e.Err.Error()))
	default:
		s = fmt.Sprintf("smtp %s: failed", e.Stage)
	}
	if e.Refused {
		s += " (refused before sending; nothing reached the server)"
	}
	if e.MaybeDelivered {
		s += " (the server may have accepted the message)"
	}
	return s
}

func (e *SendError) Unwrap() error { return e.Err }
