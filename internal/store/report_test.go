package store

import "testing"

// TestReplyGroup: a failed row's own address is masked in its reply, in any
// case, wherever and however often it appears, and the rest of the reply is
// kept byte for byte, also when lowercasing would change a letter's length
// (İ: the mask used to leave "<address>g").
func TestReplyGroup(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ reply, email, want string }{
		{"550 5.1.1 <ann@example.org>: no such user", "ann@example.org", "550 5.1.1 <address>: no such user"},
		{"550 <ANN@Example.org> unknown; ann@example.org", "ann@example.org", "550 <address> unknown; <address>"},
		{"550 <İx@example.org>: no such user", "İx@example.org", "550 <address>: no such user"},
		{"550 İİ <bob@example.org>", "bob@example.org", "550 İİ <address>"},
		{"550 no address here", "ann@example.org", "550 no address here"},
		{"550 <ann@example.org>", "", "550 <ann@example.org>"},
		{"550 ann@example.or", "ann@example.org", "550 ann@example.or"},
	} {
		if got := ReplyGroup(c.reply, c.email); got != c.want {
			t.Errorf("ReplyGroup(%q, %q) = %q, want %q", c.reply, c.email, got, c.want)
		}
	}
}
