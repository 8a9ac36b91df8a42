package transactional

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/rangecast/rangecast/internal/message"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// Kind is the outbound_receipts kind of transactional mail.
const Kind = "transactional"

// MaxKeyLength bounds an idempotency key (characters).
const MaxKeyLength = 256

// payload is what a message's receipt stores: everything needed to render
// it again on any worker, and to tell a replay from a reused key.
type payload struct {
	FromName    string           `json:"from_name,omitempty"`
	FromAddress string           `json:"from_address"`
	To          string           `json:"to"`
	ToName      string           `json:"to_name,omitempty"`
	Subject     string           `json:"subject"`
	Text        string           `json:"text,omitempty"`
	HTML        string           `json:"html,omitempty"`
	Headers     []message.Header `json:"headers,omitempty"`
	// Template and Data are the request's template form; Subject, Text and
	// HTML then hold what TemplateVersion rendered at acceptance, so a
	// later edit of the template never changes an accepted message.
	Template        string          `json:"template,omitempty"`
	TemplateVersion int             `json:"template_version,omitempty"`
	Data            json.RawMessage `json:"data,omitempty"`
}

func payloadOf(r *pb.SendRequest) payload {
	p := payload{
		// To is trimmed as everything else that takes an address is: the
		// idempotency key is matched on it, and " ann@example.org" was a
		// new message each time, sent to the trimmed address (a tester's
		// key sent ann three copies), which erasure then did not find.
		FromName: r.GetFromName(), FromAddress: r.GetFromAddress(), To: strings.TrimSpace(r.GetTo()), ToName: r.GetToName(),
		Subject: r.GetSubject(), Text: r.GetText(), HTML: r.GetHtml(),
	}
	for _, h := range r.GetHeaders() {
		p.Headers = append(p.Headers, message.Header{Name: h.GetName(), Value: h.GetValue()})
	}
	p.Template = r.GetTemplate()
	if r.GetData() != nil {
		// encoding/json writes map keys sorted: the same data always
		// encodes to the same bytes, which the hash relies on.
		p.Data, _ = json.Marshal(r.GetData().AsMap())
	}
	return p
}

func (p payload) message() message.Transactional {
	return message.Transactional{
		FromName: p.FromName, FromAddress: p.FromAddress, To: p.To, ToName: p.ToName,
		Subject: p.Subject, Text: p.Text, HTML: p.HTML, Headers: p.Headers,
	}
}

func (p payload) encode() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("transactional: encode payload: %v", err)) // only strings
	}
	return b
}

func decodePayload(b []byte) (payload, error) {
	var p payload
	if err := json.Unmarshal(b, &p); err != nil {
		return payload{}, fmt.Errorf("transactional: stored payload: %w", err)
	}
	return p, nil
}

// hash identifies the request's content; call it on the request form
// (before a template is rendered), so a retry after the template was edited
// is still a replay. The recipient's address is compared case-insensitively
// by the store's key, so it is not part of the hash; everything else is,
// header order included (it is what is sent).
func (p payload) hash() string {
	q := p
	q.To, q.TemplateVersion = "", 0
	sum := sha256.Sum256(q.encode())
	return hex.EncodeToString(sum[:])
}

// differs names the first request field where p and q differ, for an error
// a person can act on; "" when they are the same message.
func (p payload) differs(q payload) string {
	switch {
	case p.Template != q.Template:
		return "template"
	case string(p.Data) != string(q.Data):
		return "data"
	case p.FromAddress != q.FromAddress:
		return "from_address"
	case p.FromName != q.FromName:
		return "from_name"
	case p.ToName != q.ToName:
		return "to_name"
	case p.Subject != q.Subject:
		return "subject"
	case p.Text != q.Text:
		return "text"
	case p.HTML != q.HTML:
		return "html"
	case !slices.Equal(p.Headers, q.Headers):
		return "headers"
	}
	return ""
}
