package address

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCanonical(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
	}{
		{"a@example.com", "a@example.com"},
		{"A.B+tag@Example.COM", "A.B+tag@example.com"},
		{"jörg@bücher.example", "jörg@bücher.example"},
		{"jo\u0308rg@bu\u0308cher.example", "jörg@bücher.example"}, // decomposed → NFC
		{"x@xn--bcher-kva.example", "x@bücher.example"},            // A-label → U-label
		{"x@BÜCHER.example", "x@bücher.example"},
		{"o'brien@x.io", "o'brien@x.io"},
	} {
		got, err := Canonical(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Canonical(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestCanonicalRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Reason
	}{
		{"", ReasonEmpty},
		{"ip@[127.0.0.1]", ReasonIPLiteral},
		{"ip@[IPv6:::1]", ReasonIPLiteral},
		{"ip@127.0.0.1", ReasonIPLiteral},
		{"a@-x.com", ReasonHost},
		{"a@x-.com", ReasonHost},
		{"a@x..com", ReasonHost},
		{"a@localhost", ReasonHost},
		{"a@x_y.com", ReasonHost},
		{"a%b@x.com", ReasonPercentHack},
		{"a\u00a0b@x.com", ReasonControl}, // NBSP
		{"a\u200bb@x.com", ReasonControl}, // zero-width space
		{"ab@x\u200d.com", ReasonControl}, // zero-width joiner
		{"ab@x.com\u202e", ReasonControl}, // bidi override
		{"a\x00b@x.com", ReasonControl},
		{"a\x1b[31mb@x.com", ReasonControl},
		{"a b@x.com", ReasonControl},
		{"a\xffb@x.com", ReasonEncoding},
		{`"a b"@x.com`, ReasonControl},
		{`"ab"@x.com`, ReasonQuoted},
		{"a..b@x.com", ReasonSyntax},
		{".ab@x.com", ReasonSyntax},
		{"ab.@x.com", ReasonSyntax},
		{"a(b)@x.com", ReasonSyntax},
		{"@x.com", ReasonSyntax},
		{"ab@", ReasonSyntax},
		{"abx.com", ReasonSyntax},
	} {
		_, err := Canonical(tc.in)
		var ae *Error
		if !errors.As(err, &ae) || ae.Reason != tc.want {
			t.Errorf("Canonical(%q) = %v; want reason %q", tc.in, err, tc.want)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Canonical(%q): %v is not ErrInvalid", tc.in, err)
		}
	}
}

// One mailbox, one key: composed and decomposed, upper and lower case
// beyond ASCII, U-labels and A-labels.
func TestKeySameMailbox(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{
		{"\u00e9@x.com", "e\u0301@x.com"},
		{"Ü@x.com", "ü@x.com"},
		{"ÉMILE@X.COM", "émile@x.com"},
		{"x@bücher.example", "x@xn--bcher-kva.example"},
		{"ΣΟΦΊΑ@x.gr", "σοφία@x.gr"},
	} {
		if a, b := Key(pair[0]), Key(pair[1]); a != b {
			t.Errorf("Key(%q) = %q, Key(%q) = %q; want equal", pair[0], a, pair[1], b)
		}
	}
	if Key("a@x.com") == Key("b@x.com") {
		t.Error("different mailboxes share a key")
	}
}

func TestASCIIDomain(t *testing.T) {
	t.Parallel()
	got, utf8Local, err := ASCIIDomain("jörg@bücher.example")
	if err != nil || got != "jörg@xn--bcher-kva.example" || !utf8Local {
		t.Fatalf("ASCIIDomain = %q, %v, %v", got, utf8Local, err)
	}
	got, utf8Local, err = ASCIIDomain("joerg@bücher.example")
	if err != nil || got != "joerg@xn--bcher-kva.example" || utf8Local {
		t.Fatalf("ASCIIDomain = %q, %v, %v", got, utf8Local, err)
	}
	if _, _, err := ASCIIDomain("a@-x-.com"); err == nil {
		t.Fatal("an invalid domain was encoded")
	}
}

// FuzzCanonical: what Canonical accepts it accepts again unchanged
// (idempotent); the key survives canonicalisation and the A-label round
// trip; a key is a fixed point of Key; nothing accepted carries a control
// or invisible character.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{"a@x.com", "Ü@x.com", "e\u0301@x.com", "x@xn--bcher-kva.example", "ip@[1.2.3.4]",
		"a%b@x.com", "a\u00a0@x.com", "ΣΟΦΊΑ@X.GR", "ß@straße.de", "ﬀ@x.com", "a@ＥＸＡＭＰＬＥ.com", "İ@x.com", "\u0345@x.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k := Key(s)
		if Key(k) != k {
			t.Fatalf("Key not idempotent: Key(%q) = %q, Key of that = %q", s, k, Key(k))
		}
		c, err := Canonical(s)
		if err != nil {
			return
		}
		if !utf8.ValidString(c) || len(c) > MaxLen*2 {
			t.Fatalf("Canonical(%q) = %q", s, c)
		}
		c2, err := Canonical(c)
		if err != nil || c2 != c {
			t.Fatalf("Canonical not idempotent: %q -> %q -> %q, %v", s, c, c2, err)
		}
		if Key(c) != k {
			t.Fatalf("Key(%q) = %q but Key(Canonical) = %q", s, k, Key(c))
		}
		if _, _, bad := invisible(c); bad {
			t.Fatalf("Canonical(%q) = %q has an invisible character", s, c)
		}
		ascii, _, err := ASCIIDomain(c)
		if err != nil {
			t.Fatalf("ASCIIDomain(%q): %v", c, err)
		}
		back, err := Canonical(ascii)
		if err != nil || Key(back) != k {
			t.Fatalf("A-label round trip: %q -> %q -> %q (%v); key %q", c, ascii, back, err, k)
		}
	})
}

// TestPlainDomainIsIDNA: wherever plainDomain takes its short cut, the
// domains profile would have accepted the name and given the same A-labels
// and U-labels (its lowercase form). Checked on every name over a small
// alphabet up to 7 bytes, on long labels and names at the length limits,
// and by FuzzPlainDomain.
func TestPlainDomainIsIDNA(t *testing.T) {
	t.Parallel()
	const alphabet = "aZ9-.x"
	var names []string
	var grow func(prefix string)
	grow = func(prefix string) {
		names = append(names, prefix)
		if len(prefix) == 7 {
			return
		}
		for i := 0; i < len(alphabet); i++ {
			grow(prefix + alphabet[i:i+1])
		}
	}
	grow("")
	label63 := strings.Repeat("a", 63)
	names = append(names, "xn--bcher-kva.example", "XN--BCHER-KVA.example", "ab--c.example", "a--b.example", label63+".com",
		label63+"a.com", strings.Repeat(label63+".", 3)+strings.Repeat("b", 61), strings.Repeat(label63+".", 3)+strings.Repeat("b", 62),
		"example.com.", ".example.com", "a..b", "-a.com", "a-.com", "1.2.3.4", "EXAMPLE.COM")
	plain := 0
	for _, d := range names {
		if !plainDomain(d) {
			continue
		}
		plain++
		ascii, err := domains.ToASCII(d)
		if err != nil || ascii != strings.ToLower(d) {
			t.Fatalf("plainDomain(%q) but ToASCII = %q, %v", d, ascii, err)
		}
		uni, err := domains.ToUnicode(ascii)
		if err != nil || uni != ascii {
			t.Fatalf("plainDomain(%q) but ToUnicode(%q) = %q, %v", d, ascii, uni, err)
		}
	}
	if plain < len(names)/10 {
		t.Fatalf("plainDomain took %d of %d names: the check never ran", plain, len(names))
	}
	for _, d := range []string{"example.com", "Mail.Example.COM", "a-b.c0", label63 + ".com"} {
		if !plainDomain(d) {
			t.Errorf("plainDomain(%q) = false; the common case should skip the profile", d)
		}
	}
}

// FuzzPlainDomain: the short cut agrees with the profile on any input.
func FuzzPlainDomain(f *testing.F) {
	for _, s := range []string{"example.com", "xn--bcher-kva.example", "a--b.c", "bücher.example", "EXAMPLE.com", "a.b."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, d string) {
		if !plainDomain(d) {
			return
		}
		ascii, err := domains.ToASCII(d)
		if err != nil || ascii != strings.ToLower(d) {
			t.Fatalf("plainDomain(%q) but ToASCII = %q, %v", d, ascii, err)
		}
		if uni, err := domains.ToUnicode(ascii); err != nil || uni != ascii {
			t.Fatalf("plainDomain(%q) but ToUnicode = %q, %v", d, uni, err)
		}
	})
}
