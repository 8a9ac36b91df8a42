package governor

import (
	"strings"
	"unicode"
)

// Receiving providers that run many domains on one infrastructure. A breaker
// or a quota hold is about the infrastructure that refused, so gmail.com and
// googlemail.com must trip and hold together.
const (
	ProviderGoogle    = "google"
	ProviderMicrosoft = "microsoft"
	ProviderYahoo     = "yahoo"
	ProviderApple     = "apple"
)

// providerDomains are the exact domains of the big providers.
var providerDomains = map[string]string{
	"gmail.com":      ProviderGoogle,
	"googlemail.com": ProviderGoogle,
	"msn.com":        ProviderMicrosoft,
	"ymail.com":      ProviderYahoo,
	"aol.com":        ProviderYahoo,
	"icloud.com":     ProviderApple,
	"me.com":         ProviderApple,
	"mac.com":        ProviderApple,
}

// providerBrands are the providers present under many country suffixes
// (outlook.fr, hotmail.co.uk, yahoo.co.jp, live.com.au).
var providerBrands = map[string]string{
	"outlook": ProviderMicrosoft,
	"hotmail": ProviderMicrosoft,
	"live":    ProviderMicrosoft,
	"yahoo":   ProviderYahoo,
}

// Provider maps a recipient domain to its receiving provider: "google",
// "microsoft", "yahoo", "apple", or else the domain itself, lower-cased. It
// also accepts a whole address (the part after the last '@' is used) and a
// provider name (which maps to itself), so Provider(Provider(x)) ==
// Provider(x) and callers may pass either to the Domain methods.
//
// "outlook.*" and the like match the brand followed by a country-style
// suffix of one label (outlook.com, outlook.fr) or two labels whose first is
// at most three characters (hotmail.co.uk, live.com.au), so a company's own
// outlook.example.org is not taken for Microsoft.
func Provider(recipientDomain string) string {
	d := normalizeDomain(recipientDomain)
	if p, ok := providerDomains[d]; ok {
		return p
	}
	if brand, suffix, ok := strings.Cut(d, "."); ok {
		if p, ok := providerBrands[brand]; ok && countrySuffix(suffix) {
			return p
		}
	}
	return d
}

// normalizeDomain lower-cases, keeps what follows the last '@', and trims
// white space and trailing dots (the root of a fully qualified name).
func normalizeDomain(s string) string {
	s = strings.ToLower(s)
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		s = s[i+1:]
	}
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	return strings.TrimRightFunc(s, func(r rune) bool { return r == '.' || unicode.IsSpace(r) })
}

// countrySuffix reports whether s looks like a public suffix a big provider
// registers its brand under: "com", "fr", "co.uk", "com.au".
func countrySuffix(s string) bool {
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" {
			return false
		}
	}
	switch len(labels) {
	case 1:
		return true
	case 2:
		return len(labels[0]) <= 3
	}
	return false
}
