package cli

import (
	"strings"
	"testing"
	"time"
)

func TestParseAt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		at, tz string
		want   string // RFC 3339 in UTC, or "error: ..." naming what the message says
	}{
		{"2031-03-14T09:00:00Z", "", "2031-03-14T09:00:00Z"},
		{"2031-03-14T09:00:00+01:00", "", "2031-03-14T08:00:00Z"},
		{"2031-03-14 09:00", "Europe/Paris", "2031-03-14T08:00:00Z"},
		{"2031-07-14T09:00", "Europe/Paris", "2031-07-14T07:00:00Z"}, // summer time
		{"2031-03-14 09:00:30", "America/New_York", "2031-03-14T13:00:30Z"},
		{"2031-03-14 09:00", "", "error: --tz ZONE"},
		{"2031-03-14T09:00:00Z", "Europe/Paris", "error: has its own offset"},
		{"2031-03-14 09:00", "Mars/Olympus", "error: not a time zone"},
		{"tomorrow", "UTC", "error: give a local time"},
		// Paris went forward from 02:00 to 03:00 on 2031-03-30 and goes
		// back from 03:00 to 02:00 on 2031-10-26.
		{"2031-03-30 02:30", "Europe/Paris", "error: does not exist in Europe/Paris: the clocks go forward"},
		{"2031-03-30 03:00", "Europe/Paris", "2031-03-30T01:00:00Z"},
		{"2031-03-30 01:59", "Europe/Paris", "2031-03-30T00:59:00Z"},
		{"2031-10-26 02:30", "Europe/Paris", "error: happens twice in Europe/Paris: the clocks go back over it that day; give the one you mean as RFC 3339 with its offset (2031-10-26T02:30:00+02:00 or 2031-10-26T02:30:00+01:00)"},
		{"2031-10-26 03:00", "Europe/Paris", "2031-10-26T02:00:00Z"},
		{"2031-11-02 01:30", "America/New_York", "error: happens twice"},
		{"2031-03-09 02:30", "America/New_York", "error: does not exist"},
		{"2031-03-09 12:00", "UTC", "2031-03-09T12:00:00Z"},
	} {
		got, err := parseAt(c.at, c.tz)
		if want, isErr := strings.CutPrefix(c.want, "error: "); isErr {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("parseAt(%q, %q) = %v, %v; want an error saying %q", c.at, c.tz, got, err, want)
			}
			continue
		}
		if err != nil || got.UTC().Format(time.RFC3339) != c.want {
			t.Errorf("parseAt(%q, %q) = %v, %v; want %s", c.at, c.tz, got, err, c.want)
		}
	}
}

func TestCSVCell(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"ann@example.org":   "ann@example.org",
		"=HYPERLINK(\"x\")": "'=HYPERLINK(\"x\")",
		"+1@example.org":    "'+1@example.org",
		"-2@example.org":    "'-2@example.org",
		"@SUM(A1)":          "'@SUM(A1)",
		"550 5.1.1 no such": "550 5.1.1 no such",
		"":                  "",
	} {
		if got := csvCell(in); got != want {
			t.Errorf("csvCell(%q) = %q; want %q", in, got, want)
		}
	}
}
