package pageworker

import (
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/transport"
)

// TestExplainForNamesTheContactNotTheAddress: a halt's reason names the
// contact by id and withholds the address, in the server's reply too: a
// reason is kept in KV and logs, which an erasure does not reach (tester).
func TestExplainForNamesTheContactNotTheAddress(t *testing.T) {
	c := store.Contact{ID: ulid.Make(), Email: "Zoë.Example@Example.org", Name: "Zoë Quixote"}
	err := &transport.SendError{Code: 550, Enhanced: "5.7.1", Text: "<zoë.example@example.org>: message to zoë quixote rejected as spam", Stage: transport.StageData}
	got := explainFor(err, c)
	if strings.Contains(strings.ToLower(got), "example.org") || strings.Contains(strings.ToLower(got), "quixote") || !strings.Contains(got, store.Recipient) || !strings.Contains(got, "(sending to contact "+c.ID.String()+")") {
		t.Fatalf("explainFor = %q; want the contact's id and the address withheld", got)
	}
	connect := &transport.SendError{Code: 421, Text: "too many connections", Stage: transport.StageConnect}
	if got := explainFor(connect, c); strings.Contains(got, "contact") {
		t.Fatalf("a refusal at connect names a contact: %q", got)
	}
}
