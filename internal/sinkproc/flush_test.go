package sinkproc

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFlushOnRead: replies are held until the server reads again, then go
// out in one write.
func TestFlushOnRead(t *testing.T) {
	t.Parallel()
	server, client := net.Pipe()
	c := &flushOnRead{Conn: server}
	defer c.Close()
	defer client.Close()
	c.Write([]byte("250 one\r\n")) //nolint:errcheck // held, never fails
	c.Write([]byte("250 two\r\n")) //nolint:errcheck
	buf := make([]byte, 64)
	client.SetReadDeadline(time.Now().Add(50 * time.Millisecond)) //nolint:errcheck
	if n, err := client.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("before the server reads, the client read %q, %v; want nothing yet", buf[:n], err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	client.SetReadDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	n, err := client.Read(buf)
	if err != nil || string(buf[:n]) != "250 one\r\n250 two\r\n" {
		t.Fatalf("once the server reads, the client read %q, %v; want both replies at once", buf[:n], err)
	}
	client.Write([]byte("x")) //nolint:errcheck
	if err := <-read; err != nil {
		t.Fatal(err)
	}
}

// TestPipelinedRepliesTogether: a transaction sent in one write, as the
// page workers send one, is answered in one segment; one sent command by
// command is answered command by command.
func TestPipelinedRepliesTogether(t *testing.T) {
	t.Parallel()
	s, err := Start(Options{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	r := bufio.NewReader(conn)
	readReply := func() string {
		t.Helper()
		var all string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			all += line
			if len(line) < 4 || line[3] != '-' {
				return all
			}
		}
	}
	readReply()                                   // greeting
	conn.Write([]byte("EHLO client.example\r\n")) //nolint:errcheck
	if ehlo := readReply(); !strings.Contains(ehlo, "PIPELINING") || !strings.Contains(ehlo, "CHUNKING") {
		t.Fatalf("EHLO reply %q offers no PIPELINING and CHUNKING", ehlo)
	}
	const body = "Subject: x\r\n\r\nhello\r\n"
	conn.Write([]byte("MAIL FROM:<a@example.org>\r\nRCPT TO:<b@example.org>\r\nBDAT " + strconv.Itoa(len(body)) + " LAST\r\n" + body)) //nolint:errcheck
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	replies := strings.SplitAfter(string(buf[:n]), "\r\n")
	if len(replies) != 4 || replies[3] != "" {
		t.Fatalf("one read got %q; want the transaction's 3 replies", buf[:n])
	}
	for _, r := range replies[:3] {
		if !strings.HasPrefix(r, "250") {
			t.Fatalf("reply %q in %q; want 250", r, buf[:n])
		}
	}
	conn.Write([]byte("NOOP\r\n")) //nolint:errcheck
	if n, err = conn.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "250") {
		t.Fatalf("NOOP: %q, %v", buf[:n], err)
	}
	conn.Write([]byte("QUIT\r\n")) //nolint:errcheck
	if n, err = conn.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "221") {
		t.Fatalf("QUIT: %q, %v; want 221 before the connection closes", buf[:n], err)
	}
	if st := s.Stats(); st.Recipients != 1 {
		t.Fatalf("stats %+v; want the one recipient", st)
	}
}

// TestCloseDoesNotWaitForAStuckClient: a client that stopped reading holds
// a flush in its write; Close ends it instead of waiting for the write
// deadline (Sink.Close took 57 s per such connection).
func TestCloseDoesNotWaitForAStuckClient(t *testing.T) {
	t.Parallel()
	server, client := net.Pipe() // unbuffered: a write waits for a read that never comes
	defer client.Close()
	c := &flushOnRead{Conn: server}
	c.Write([]byte("250 never read\r\n")) //nolint:errcheck
	flushed := make(chan error, 1)
	go func() { flushed <- c.flush() }()
	time.Sleep(50 * time.Millisecond) // the flush is in its write
	closed := make(chan struct{})
	go func() {
		c.Close() //nolint:errcheck
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a client that reads nothing")
	}
	if err := <-flushed; err == nil {
		t.Error("the stuck flush returned no error after Close")
	}
}
