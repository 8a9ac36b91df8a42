package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/emersion/go-smtp"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func reply(stage string, code int, enhanced, text string) error {
	return &SendError{Stage: stage, Code: code, Enhanced: enhanced, Text: text}
}

func noReply(stage string, err error) error {
	return &SendError{Stage: stage, Err: err}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want Class
	}{
		// Recipient: positively one bad address.
		{"5.1.1 at rcpt", reply(StageRcpt, 550, "5.1.1", "user unknown"), Recipient},
		{"5.1.10 null MX at rcpt", reply(StageRcpt, 556, "5.1.10", "recipient address has null MX"), Recipient},
		{"5.1.2 bad domain at rcpt", reply(StageRcpt, 550, "5.1.2", "bad destination system"), Recipient},
		{"550 mailbox unavailable, no enhanced", reply(StageRcpt, 550, "", "Requested action not taken: mailbox unavailable"), Recipient},
		{"550 User unknown, no enhanced", reply(StageRcpt, 550, "", "User unknown"), Recipient},
		{"551 does not exist, 5.0.0", reply(StageRcpt, 551, "5.0.0", "recipient does not exist"), Recipient},
		{"553 no such user", reply(StageRcpt, 553, "", "sorry, no such user"), Recipient},

		// Not recipient, although it looks close.
		{"5.1.1 at MAIL is about the sender", reply(StageMail, 550, "5.1.1", "sender unknown"), Channel},
		{"5.1.8 at rcpt is about the sender", reply(StageRcpt, 553, "5.1.8", "bad sender system address"), Channel},
		{"relay denied at rcpt", reply(StageRcpt, 554, "", "Relay access denied"), Channel},
		{"550 mailbox text with policy code", reply(StageRcpt, 550, "5.7.1", "mailbox blocked by policy"), Quota},
		{"raw 5.1.1 without a stage", &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "user unknown"}, Channel},

		// Quota: before Transient.
		{"421 4.7.0 rate limited", reply(StageRcpt, 421, "4.7.0", "rate limited"), Quota},
		{"450 4.7.1 at mail", reply(StageMail, 450, "4.7.1", "try again later"), Quota},
		{"550 5.7.1 daily quota", reply(StageData, 550, "5.7.1", "Daily user sending quota exceeded"), Quota},
		{"452 too many recipients", reply(StageRcpt, 452, "", "Too many recipients"), Quota},
		{"421 throttling, no enhanced", reply(StageMail, 421, "", "Throttling failure"), Quota},
		{"554 sending limit", reply(StageData, 554, "5.0.0", "sending limit exceeded"), Quota},
		{"raw 421 4.7.0", &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 7, 0}, Message: "slow down"}, Quota},

		// Transient.
		{"451 4.3.0", reply(StageRcpt, 451, "4.3.0", "try later"), Transient},
		{"452 4.3.1 storage", reply(StageData, 452, "4.3.1", "insufficient system storage"), Transient},
		{"421 service closing", reply(StageMail, 421, "4.4.2", "idle timeout"), Transient},
		{"454 4.7.0 at auth", reply(StageAuth, 454, "4.7.0", "temporary authentication failure"), Transient},
		{"deadline", noReply(StageData, fmt.Errorf("%w: %w", context.DeadlineExceeded, net.ErrClosed)), Transient},
		{"canceled", noReply(StageRcpt, context.Canceled), Transient},
		{"bare deadline", context.DeadlineExceeded, Transient},
		{"net timeout", noReply(StageConnect, &net.OpError{Op: "read", Err: timeoutErr{}}), Transient},
		{"connection refused", noReply(StageConnect, &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), Transient},
		{"connection reset", noReply(StageData, &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), Transient},
		{"EOF", noReply(StageMail, io.EOF), Transient},
		{"unexpected EOF", noReply(StageData, io.ErrUnexpectedEOF), Transient},
		{"wrapped SendError", fmt.Errorf("page 3: %w", reply(StageRcpt, 451, "4.3.0", "later")), Transient},

		// Channel: broken channel, and everything unrecognised.
		{"535 auth failed", reply(StageAuth, 535, "5.7.8", "Authentication failed"), Channel},
		{"530 auth required", reply(StageMail, 530, "5.7.0", "Authentication required"), Channel},
		{"534 mechanism too weak", reply(StageAuth, 534, "5.7.9", "mechanism too weak"), Channel},
		{"5xx at auth", reply(StageAuth, 504, "5.5.4", "unrecognized mechanism"), Channel},
		{"sender rejected", reply(StageMail, 553, "5.1.8", "sender domain not allowed"), Channel},
		{"message too large", reply(StageData, 552, "5.3.4", "message size exceeds fixed limit"), Channel},
		{"552 too big, no enhanced", reply(StageMail, 552, "", "message too big"), Channel},
		{"554 content", reply(StageData, 554, "5.6.0", "content rejected"), Channel},
		{"dns not found", noReply(StageConnect, &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "nope.invalid", IsNotFound: true}}), Channel},
		{"bad certificate", noReply(StageConnect, &tls.CertificateVerificationError{Err: errors.New("x509: unknown authority")}), Channel},
		{"not TLS", noReply(StageConnect, tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), Channel},
		{"credentials without TLS", noReply(StageAuth, errors.New("refusing to send credentials")), Channel},
		{"transport closed", ErrClosed, Channel},
		{"unknown error", errors.New("something odd"), Channel},
		{"3xx reply nobody expected", reply(StageData, 354, "", "go ahead"), Channel},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, rule := classify(tc.err)
			if got != tc.want {
				t.Errorf("Classify(%v) = %v by rule %q, want %v", tc.err, got, rule, tc.want)
			}
			if Classify(tc.err) != got {
				t.Error("Classify and classify disagree")
			}
		})
	}
}

func TestClassifyNil(t *testing.T) {
	t.Parallel()
	if c := Classify(nil); c != 0 || c.String() != "none" {
		t.Errorf("Classify(nil) = %d %q", c, c)
	}
}

func TestClassString(t *testing.T) {
	t.Parallel()
	for c, want := range map[Class]string{Recipient: "recipient", Transient: "transient", Quota: "quota", Channel: "channel", Class(99): "none"} {
		if c.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(c), c.String(), want)
		}
	}
}

func TestSendErrorMessage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  *SendError
		want string
	}{
		{&SendError{Stage: StageRcpt, Code: 550, Enhanced: "5.1.1", Text: "user unknown"}, "smtp rcpt: 550 5.1.1 user unknown"},
		{&SendError{Stage: StageMail, Code: 421, Text: "bye"}, "smtp mail: 421 bye"},
		{&SendError{Stage: StageConnect, Err: io.EOF}, "smtp connect: EOF"},
		{&SendError{Stage: StageData, Err: io.EOF, MaybeDelivered: true}, "smtp data: EOF (the server may have accepted the message)"},
	}
	for _, tc := range cases {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	if !errors.Is(&SendError{Stage: StageData, Err: io.EOF}, io.EOF) {
		t.Error("SendError does not unwrap to its Err")
	}
}
