package transport

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rangecast/rangecast/internal/capture"
	"github.com/rangecast/rangecast/internal/message"
)

// benchMessage is shaped like a rendered newsletter: headers, then about
// 12 KB of 76-column quoted-printable lines, a few of them starting with a
// dot so the stuffing path is exercised.
func benchMessage() message.Rendered {
	var b strings.Builder
	b.WriteString("From: News <news@example.com>\r\nTo: ada@example.org\r\nSubject: The weekly\r\n" +
		"Message-ID: <bench@example.com>\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n" +
		"Content-Transfer-Encoding: quoted-printable\r\n\r\n")
	line := strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 2)[:75] + "=\r\n"
	for i := range 160 {
		if i%40 == 0 {
			b.WriteString(".a line the relay must not take for the end\r\n")
		}
		b.WriteString(line)
	}
	b.WriteString("end\r\n")
	return message.Rendered{MessageID: "bench@example.com", From: "news@example.com", To: "ada@example.org", Bytes: []byte(b.String())}
}

// BenchmarkSend measures one message over a pooled connection, the steady
// state of a page worker. "capture" is the go-smtp server the other tests
// use (its own parsing and storage are counted too), which offers CHUNKING,
// and "capture-data" the same server through DATA; "sink" is the minimal
// scripted server without CHUNKING, so the numbers are mostly the client's,
// and "sink-chunking" the same with it.
func BenchmarkSend(b *testing.B) {
	m := benchMessage()
	b.Run("capture", func(b *testing.B) {
		srv, err := capture.Start("127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { srv.Close() })
		benchSend(b, srv.URL(), m)
	})
	b.Run("capture-data", func(b *testing.B) {
		srv, err := capture.Start("127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { srv.Close() })
		benchSend(b, srv.URL()+"&chunking=0", m)
	})
	b.Run("sink", func(b *testing.B) {
		srv := startRaw(b, &rawServer{ext: []string{"PIPELINING", "8BITMIME", "SIZE 10240000"}})
		benchSend(b, srv.url(), m)
	})
	b.Run("sink-chunking", func(b *testing.B) {
		srv := startRaw(b, &rawServer{ext: []string{"PIPELINING", "CHUNKING", "8BITMIME", "SIZE 10240000"}})
		benchSend(b, srv.url(), m)
	})
}

func benchSend(b *testing.B, url string, m message.Rendered) {
	tr, err := NewSMTP(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Close() })
	ctx := b.Context()
	if _, err := tr.Send(ctx, m); err != nil { // connect outside the timing
		b.Fatal(err)
	}
	b.SetBytes(int64(len(m.Bytes)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.Send(ctx, m); err != nil {
			b.Fatal(fmt.Errorf("send: %w", err))
		}
	}
}
