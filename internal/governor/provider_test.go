package governor

import (
	"strings"
	"testing"
	"unicode"
)

func TestProvider(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"gmail.com", ProviderGoogle},
		{"googlemail.com", ProviderGoogle},
		{"GMail.COM", ProviderGoogle},
		{"someone@Gmail.com.", ProviderGoogle},
		{" gmail.com ", ProviderGoogle},
		{"outlook.com", ProviderMicrosoft},
		{"outlook.fr", ProviderMicrosoft},
		{"hotmail.com", ProviderMicrosoft},
		{"hotmail.co.uk", ProviderMicrosoft},
		{"live.com", ProviderMicrosoft},
		{"live.com.au", ProviderMicrosoft},
		{"msn.com", ProviderMicrosoft},
		{"yahoo.com", ProviderYahoo},
		{"yahoo.co.jp", ProviderYahoo},
		{"yahoo.com.br", ProviderYahoo},
		{"ymail.com", ProviderYahoo},
		{"aol.com", ProviderYahoo},
		{"icloud.com", ProviderApple},
		{"me.com", ProviderApple},
		{"mac.com", ProviderApple},
		// Everything else is its own provider.
		{"example.com", "example.com"},
		{"Mail.Example.COM", "mail.example.com"},
		{"mail.gmail.com", "mail.gmail.com"},           // not Google's mail domain
		{"outlook.example.org", "outlook.example.org"}, // a company's own host, not Microsoft
		{"live", "live"},                               // no suffix
		{"outlook..com", "outlook..com"},               // empty label
		{"aol.co.uk", "aol.co.uk"},                     // only aol.com is listed
		{"", ""},
		// Provider names map to themselves, so either may be passed.
		{ProviderGoogle, ProviderGoogle},
		{ProviderMicrosoft, ProviderMicrosoft},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			if got := Provider(tt.in); got != tt.want {
				t.Fatalf("Provider(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzProvider: Provider never panics, is idempotent (a provider is its own
// provider, so callers may pass names or domains), ignores ASCII case, and
// returns a lower-cased domain without spaces, '@' or a trailing dot.
func FuzzProvider(f *testing.F) {
	for _, s := range []string{"gmail.com", "a@Hotmail.CO.UK.", "outlook.example.org", "live", " x . ", "\xff@yahoo.fr", "İ.com", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := Provider(s)
		if again := Provider(p); again != p {
			t.Fatalf("Provider(%q) = %q but Provider(%q) = %q", s, p, p, again)
		}
		if isASCII(s) {
			if up := Provider(strings.ToUpper(s)); up != p {
				t.Fatalf("Provider(%q) = %q but Provider(upper) = %q", s, p, up)
			}
		}
		if strings.ContainsRune(p, '@') || strings.HasSuffix(p, ".") || strings.TrimSpace(p) != p {
			t.Fatalf("Provider(%q) = %q: not a normalised domain", s, p)
		}
		if strings.IndexFunc(p, func(r rune) bool { return r < unicode.MaxASCII && unicode.IsUpper(r) }) >= 0 {
			t.Fatalf("Provider(%q) = %q: upper case left", s, p)
		}
	})
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= unicode.MaxASCII {
			return false
		}
	}
	return true
}
