package cli

import (
	"bytes"
	"strings"
	"testing"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

func TestShown(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Ann":                   "Ann",
		"Jörg Müller":           "Jörg Müller",
		"\x1b[31mred\x1b[0m":    `\x1b[31mred\x1b[0m`,
		"\x1b]0;title\x07":      `\x1b]0;title\x07`,
		"over\rwrite":           `over\rwrite`,
		"two\nlines":            `two\nlines`,
		"c1\u009bcsi":           `c1\x9bcsi`,
		"evil\u202etxt.exe":     `evil\u202etxt.exe`,
		"tab\tseparated values": `tab\tseparated values`,
	} {
		if got := shown(in); got != want {
			t.Errorf("shown(%q) = %q, want %q", in, got, want)
		}
	}
}

// contacts show writes a contact's data with its control characters
// escaped: a name with an ESC sequence cannot recolour or retitle the
// terminal of the person reading it.
func TestContactShowEscapesData(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	printContact(&out, &pb.GetContactResponse{
		Contact: &pb.Contact{Id: "01J", Email: "a@example.org", Name: "\x1b]0;owned\x07Ann\x1b[2J",
			Attributes: map[string]string{"k\x1b[1m": "v\x1b[1m"}, Segments: []string{"s\x1b[1m"}},
		History: []*pb.ContactSend{{BroadcastName: "b\x1b[5m", Reply: "550\x1b[31m"}},
	})
	if strings.ContainsRune(out.String(), 0x1b) {
		t.Errorf("raw ESC in output:\n%q", out.String())
	}
}
