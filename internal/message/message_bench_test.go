package message

import (
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// BenchmarkRender renders and MIME-builds one newsletter-sized message (a
// few paragraphs of HTML, the derived plain-text part, quoted-printable,
// headers): the per-message work of a page worker besides SMTP.
//
//	go test -run '^$' -bench Render -benchmem ./internal/message/
func BenchmarkRender(b *testing.B) {
	para := "<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation.</p>\n"
	c, err := Compile(Template{
		FromName:    "Bench",
		FromAddress: "news@bench.example",
		Subject:     "News for {{.Name}}",
		HTML: "<html><body><h1>Hello {{.Name}}</h1>\n<p>The letter for {{.Attributes.city}}.</p>\n" + strings.Repeat(para, 4) +
			`<p><a href="https://bench.example/read">Read it on the web</a></p></body></html>`,
	})
	if err != nil {
		b.Fatal(err)
	}
	p := Params{
		BroadcastID: ulid.Make(),
		Contact:     Contact{ID: ulid.Make(), Email: "c123456@bench.example", Name: "Contact 123456", Attributes: map[string]any{"city": "Oslo"}},
		Date:        time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC),
	}
	var size int
	for b.Loop() {
		m, err := c.Render(p)
		if err != nil {
			b.Fatal(err)
		}
		size = len(m.Bytes)
	}
	b.ReportMetric(float64(size), "bytes/msg")
}
