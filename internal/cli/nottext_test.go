package cli

import (
	"testing"
)

// TestNotUTF8Named: an argument, a flag value or a file that is not valid
// UTF-8 is refused naming what to fix. Sent as it was, it failed in gRPC's
// encoding with "Internal: grpc: error while marshaling: string field
// contains invalid UTF-8" (a real-process probe).
func TestNotUTF8Named(t *testing.T) {
	t.Parallel()
	s := newOpsStack(t, true, 0)
	s.refused(`argument 1 ("a\xff\xfe@example.org") is not valid UTF-8`, "contacts", "show", "a\xff\xfe@example.org")
	s.refused(`argument 1 ("seg\xff") is not valid UTF-8`, "segments", "create", "seg\xff")
	html := writeFile(t, "news.html", `<a href="{{.UnsubscribeURL}}">Unsubscribe</a>`)
	s.refused(`--subject ("S\xff") is not valid UTF-8`, "broadcasts", "create", "--name", "n", "--from", "news@rangecast.test",
		"--subject", "S\xff", "--html", html)
	latin1 := writeFile(t, "latin1.html", "<p>Gr\xfc\xdfe</p><a href=\"{{.UnsubscribeURL}}\">Abmelden</a>")
	// By its flag, file and first bad byte (the server's own words named
	// none of them, a tester found).
	s.refused("--html "+latin1+" is not valid UTF-8 text (first at byte 5; a file in another encoding", "broadcasts", "create", "--name", "n", "--from", "news@rangecast.test",
		"--subject", "S", "--html", latin1)
}
