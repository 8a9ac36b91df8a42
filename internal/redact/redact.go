// Package redact removes secrets from text that may reach a log, an error
// or a terminal: the password (and user) in any URL's userinfo, wherever
// the URL appears in the text. One helper, so every place that shows a
// configured URL hides the same thing.
package redact

import (
	"regexp"
	"strings"
)

// userinfo matches "scheme://user[:password]@" (the part a URL's
// credentials live in), up to the last '@' before the host.
var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)([^/?#\s@]*@)+`)

// Placeholder replaces the userinfo.
const Placeholder = "xxxxx@"

// String returns s with the userinfo of every URL in it replaced, so
// "nats://u:s3cret@host:4222" becomes "nats://xxxxx@host:4222". Text
// without a URL is returned as is.
func String(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return userinfo.ReplaceAllString(s, "${1}"+Placeholder)
}

// Error is String of err's text, as an error; nil stays nil.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if r := String(msg); r != msg {
		return redacted{msg: r, err: err}
	}
	return err
}

type redacted struct {
	msg string
	err error
}

func (r redacted) Error() string { return r.msg }

// Unwrap keeps errors.Is/As working on the original.
func (r redacted) Unwrap() error { return r.err }
