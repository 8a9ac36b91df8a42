package redact

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"smtp://u:s3cret@relay:587":                     "smtp://xxxxx@relay:587",
		"dial nats://a:b@n1:4222, nats://c:d@n2:4222 x": "dial nats://xxxxx@n1:4222, nats://xxxxx@n2:4222 x",
		"postgres://app:p%40ss@db/x?sslmode=require":    "postgres://xxxxx@db/x?sslmode=require",
		"postgres://app:p@ss@db/x":                      "postgres://xxxxx@db/x",
		"nats://host:4222":                              "nats://host:4222",
		"no url here: a@b":                              "no url here: a@b",
		"http://host/path?mail=a@b":                     "http://host/path?mail=a@b",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(String(in), "s3cret") {
			t.Errorf("String(%q) keeps the secret", in)
		}
	}
	err := Error(&wrapErr{io.EOF, "connect smtp://u:pw@h:25"})
	if err.Error() != "connect smtp://xxxxx@h:25" || !errors.Is(err, io.EOF) {
		t.Errorf("Error = %v", err)
	}
}

type wrapErr struct {
	err error
	msg string
}

func (w *wrapErr) Error() string { return w.msg }
func (w *wrapErr) Unwrap() error { return w.err }
