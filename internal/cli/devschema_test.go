package cli

import (
	"strings"
	"testing"
)

// TestDevSchema: rangecast dev --postgres works in the URL's search_path
// when it names one, as its refusal of a second stack on one schema tells
// the user to do (it always used rangecast_dev), else in rangecast_dev; a
// search_path it cannot create as one schema is refused.
func TestDevSchema(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"postgres://postgres@127.0.0.1:5432/test", "rangecast_dev"},
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "rangecast_dev"},
		{"postgres://postgres@127.0.0.1:5432/test?search_path=probe_a", "probe_a"},
		{"postgres://postgres@127.0.0.1:5432/test?search_path=probe_a,public", "error: give one schema name"},
		{"postgres://postgres@127.0.0.1:5432/test?search_path=Bad-Name", "error: give one schema name"},
	} {
		got, err := devSchema(c.url)
		if want, isErr := strings.CutPrefix(c.want, "error: "); isErr {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("devSchema(%q) = %q, %v; want an error saying %q", c.url, got, err, want)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("devSchema(%q) = %q, %v; want %q", c.url, got, err, c.want)
		}
	}
}
