package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rangecast/rangecast/internal/api"
	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/coordinator"
	"github.com/rangecast/rangecast/internal/store"
	"github.com/rangecast/rangecast/internal/testenv"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// collect runs readCSV over src, with --multiline, and returns every row
// sent. Each chunk must be a message gRPC can marshal, as the real stream
// requires.
func collect(t *testing.T, src string, segments ...string) (*csvResult, []*pb.ContactRow, []int, error) {
	t.Helper()
	var rows []*pb.ContactRow
	var chunks []int
	res, err := readCSV(strings.NewReader(src), segments, true, func(chunk []*pb.ContactRow) error {
		if _, err := proto.Marshal(&pb.ImportContactsRequest{Rows: chunk}); err != nil {
			t.Errorf("chunk of %d rows cannot be sent: %v", len(chunk), err)
		}
		chunks = append(chunks, len(chunk))
		rows = append(rows, chunk...)
		return nil
	})
	return res, rows, chunks, err
}

func TestReadCSV(t *testing.T) {
	src := "\ufeffemail,name,plan,city\n" + // 1: header with the BOM Excel writes
		"ann@example.org,Ann,pro,Oslo\n" + // 2
		"bob@example.org,\"Bob \"\"B\"\" Jones\",free,Rome\n" + // 3: quoted quotes are fine
		"\"bad\"x@example.org,Bad,pro,Oslo\n" + // 4: text after a closing quote
		"ca\"t@example.org,Cat,pro,Oslo\n" + // 5: bare quote in the email column
		"dan@example.org,Dan\n" + // 6: 2 columns
		"eve@example.org,Eve,\"two\n" + // 7: a quoted field over two lines…
		"lines\",Paris\n" + // 8
		" fay@example.org , Fay ,pro,Bergen\n" + // 9: spaces around email and name
		"gus@example.org,Gus \"G\",pro,Lima\n" + // 10: bare quote in the name column
		"\n" + // 11: empty, skipped
		"hal@example.org,Hal,free,Lima,extra\n" + // 12: 5 columns
		"ida@example.org,Ida,free,Quito" // 13: no final newline
	res, rows, _, err := collect(t, src, "newsletter")
	if err != nil {
		t.Fatal(err)
	}
	var emails []string
	for _, r := range rows {
		emails = append(emails, r.GetEmail())
	}
	wantEmails := []string{"ann@example.org", "bob@example.org", "eve@example.org", "fay@example.org", "ida@example.org"}
	if !slices.Equal(emails, wantEmails) {
		t.Fatalf("rows sent: %v, want %v", emails, wantEmails)
	}
	if want := []int{2, 3, 7, 9, 13}; !slices.Equal(res.lines, want) {
		t.Errorf("lines of rows sent: %v, want %v", res.lines, want)
	}
	if r := rows[0]; r.GetName() != "Ann" || len(r.GetAttributes()) != 2 || r.GetAttributes()["plan"] != "pro" || r.GetAttributes()["city"] != "Oslo" {
		t.Errorf("row for line 2: %v", r)
	}
	if got := rows[1].GetName(); got != `Bob "B" Jones` {
		t.Errorf("quoted name: %q", got)
	}
	if got := rows[2].GetAttributes()["plan"]; got != "two\nlines" {
		t.Errorf("multi-line field: %q", got)
	}
	if r := rows[3]; r.GetEmail() != "fay@example.org" || r.GetName() != "Fay" {
		t.Errorf("spaces not trimmed: email %q name %q", r.GetEmail(), r.GetName())
	}
	for _, r := range rows {
		if !slices.Equal(r.GetSegments(), []string{"newsletter"}) {
			t.Errorf("row %s: segments %v, want [newsletter]", r.GetEmail(), r.GetSegments())
		}
	}
	wantRejected := []string{
		"line 4: " + `extraneous or missing " in quoted-field`,
		"line 5: " + `bare " in non-quoted-field`,
		"line 6: 2 columns, the header has 4",
		"line 10: " + `bare " in non-quoted-field`,
		"line 12: 5 columns, the header has 4",
	}
	if !slices.Equal(res.rejected, wantRejected) {
		t.Errorf("rejected:\n  %s\nwant:\n  %s", strings.Join(res.rejected, "\n  "), strings.Join(wantRejected, "\n  "))
	}
}

func TestReadCSVHeader(t *testing.T) {
	for _, src := range []string{"email\nann@example.org\n", " Email ,name\nann@example.org,Ann\n", "EMAIL,Name,plan\r\nann@example.org,Ann,pro\r\n", "\ufeffemail\n", "name,email\nAnn,ann@example.org\n"} {
		if _, _, _, err := collect(t, src); err != nil {
			t.Errorf("header of %q: %v", src, err)
		}
	}
	for src, want := range map[string]string{
		"ann@example.org,Ann\n": "no email column",
		"":                      "the CSV is empty",
		"\"email,name\n":        "read CSV header",
	} {
		_, rows, _, err := collect(t, src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("header of %q: error %v, want one mentioning %q", src, err, want)
		}
		if len(rows) != 0 {
			t.Errorf("header of %q: %d rows sent despite the error", src, len(rows))
		}
	}
}

// TestReadCSVChunks: rows travel in chunks, and line numbers stay right
// across chunk boundaries.
func TestReadCSVChunks(t *testing.T) {
	var b strings.Builder
	b.WriteString("email,name\n")
	const n = 2*importChunk + 7
	for i := range n {
		fmt.Fprintf(&b, "user%d@example.org,User %d\n", i, i)
		if i == importChunk+3 {
			b.WriteString("broken,\"x\n") // unterminated quote: swallows the rest
		}
	}
	res, rows, chunks, err := collect(t, b.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != importChunk+4 {
		t.Fatalf("%d rows sent, want %d (up to the unterminated quote)", len(rows), importChunk+4)
	}
	if !slices.Equal(chunks, []int{importChunk, 4}) {
		t.Errorf("chunks %v", chunks)
	}
	for i, line := range res.lines {
		if line != i+2 {
			t.Fatalf("row %d has line %d, want %d", i, line, i+2)
		}
	}
	if len(res.rejected) != 1 || !strings.HasPrefix(res.rejected[0], fmt.Sprintf("line %d: ", importChunk+6)) {
		t.Errorf("rejected: %v, want the unterminated quote on line %d", res.rejected, importChunk+6)
	}
}

// TestReadCSVInvalidUTF8: a file in another encoding is rejected row by row,
// with line numbers, rather than failing the whole stream when the row
// cannot be marshalled.
func TestReadCSVInvalidUTF8(t *testing.T) {
	src := "email,name,city\n" +
		"ann@example.org,Ann,Oslo\n" +
		"jose@example.org,Jos\xe9,Le\xf3n\n" + // Latin-1
		"bob@example.org,Bob,Rome\n"
	res, rows, _, err := collect(t, src)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || !slices.Equal(res.lines, []int{2, 4}) {
		t.Errorf("rows sent from lines %v, want 2 and 4", res.lines)
	}
	if len(res.rejected) != 1 || !strings.HasPrefix(res.rejected[0], "line 3: ") || !strings.Contains(res.rejected[0], "UTF-8") {
		t.Errorf("rejected: %v, want line 3 named as not UTF-8", res.rejected)
	}
	_, _, _, err = collect(t, "email,n\xe4me,city\nann@example.org,Ann,Oslo\n")
	if err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("header with invalid UTF-8: %v, want an error naming UTF-8", err)
	}
}

// testServer starts the coordinator's gRPC server on a fresh Postgres schema
// and JetStream. Import and create need no running coordinator loop, so Run
// is not started.
func testServer(t *testing.T) (string, store.Store) {
	t.Helper()
	addr, st, _ := stoppableServer(t)
	return addr, st
}

// stoppableServer is testServer with a function that stops it, for a test
// that takes the coordinator away mid-command.
func stoppableServer(t *testing.T) (string, store.Store, func()) {
	t.Helper()
	st := testenv.Postgres(t)
	_, js := testenv.NATS(t)
	b, err := bus.Setup(context.Background(), js, bus.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	c := coordinator.New(coordinator.Config{Store: st, Bus: b, Log: slog.New(slog.DiscardHandler)})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewGRPCServer(api.Config{Engine: c, Store: st, Log: slog.New(slog.DiscardHandler)})
	go srv.Serve(lis) //nolint:errcheck
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), st, srv.Stop
}

// rangecast runs the real command line with args and returns what it
// printed.
func rangecast(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := Rangecast()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// eligible returns the stored contacts that pass the gate, by email.
func eligible(t *testing.T, st store.Store, segment int64) map[string]store.Contact {
	t.Helper()
	var last ulid.ULID
	for i := range last {
		last[i] = 0xff
	}
	cs, err := st.EligiblePage(context.Background(), store.Broadcast{SegmentID: segment}, ulid.ULID{}, last, 100000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]store.Contact{}
	for _, c := range cs {
		out[c.Email] = c
	}
	return out
}

func TestContactsImportCommand(t *testing.T) {
	t.Parallel()
	addr, st := testServer(t)
	file := writeFile(t, "contacts.csv", ""+
		"email,name,plan\n"+ // 1
		"ann@example.org,Ann,pro\n"+ // 2
		"bob@example.org,Bob,free\n"+ // 3
		"not-an-email,Nobody,free\n"+ // 4: rejected by the server
		"\"bad\"x@example.org,X,pro\n"+ // 5: rejected by the CSV reader
		"cat@example.org,Cat\n"+ // 6: too few columns
		"ANN@example.org,Ann again,pro\n"+ // 7: duplicate of line 2
		"dan@example.org,\"Dan\n"+ // 8: a line break in the name…
		"Two\",pro\n"+ // 9
		"eve@example.org,Eve,pro\n"+ // 10
		"jose@example.org,Jos\xe9,pro\n") // 11: Latin-1, not UTF-8
	out, err := rangecast(t, "", "--addr", addr, "contacts", "import", "--segment", "newsletter", file)
	// Rows were rejected: the command fails (exit status 1), having
	// imported the others.
	var rej errRejected
	if !errors.As(err, &rej) || rej.rejected != 6 || rej.imported != 3 {
		t.Fatalf("import with rejected rows: error %v, want 6 rejected, 3 imported\n%s", err, out)
	}
	want := "imported 3 contacts; 6 rows rejected\n" +
		"  line 4: not-an-email: \"not-an-email\" is not a valid email address\n" +
		"  line 5: " + `extraneous or missing " in quoted-field` + "\n" +
		"  line 6: 2 columns, the header has 3\n" +
		"  line 7: ANN@example.org: duplicate of line 2\n" +
		"  line 8: a quoted field runs over 2 lines (to line 9), so lines 8–9 were read as this one row and none of them was imported; if a quote is unbalanced, fix it; if a value really holds line breaks, import with --multiline\n" +
		"  line 11: not valid UTF-8 (save the file as UTF-8)\n"
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
	seg, err := st.SegmentID(context.Background(), "newsletter")
	if err != nil {
		t.Fatalf("--segment newsletter: %v", err)
	}
	cs := eligible(t, st, seg)
	if len(cs) != 3 || cs["ann@example.org"].Name != "Ann" || cs["ann@example.org"].Attributes["plan"] != "pro" ||
		cs["bob@example.org"].Name != "Bob" || cs["eve@example.org"].Name != "Eve" {
		t.Errorf("stored in segment newsletter: %v", cs)
	}

	// A draft to the imported segment, from the command line.
	html := writeFile(t, "news.html", "<p>Hi {{.Name}}, you are on {{.Attributes.plan}}.</p><a href=\"{{.UnsubscribeURL}}\">Unsubscribe</a>")
	out, err = rangecast(t, "", "--addr", addr, "broadcasts", "create", "--name", "News", "--from", "news@example.com",
		"--subject", "Hello {{.Name}}", "--html", html, "--segment", "newsletter")
	if err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	if _, err := ulid.ParseStrict(strings.TrimSpace(out)); err != nil {
		t.Errorf("create printed %q, want the new broadcast's id", out)
	}
}

// TestContactsImportCommandLargeFile: line numbers stay right past the first
// chunk, every rejection is printed, and "-" reads stdin.
func TestContactsImportCommandLargeFile(t *testing.T) {
	t.Parallel()
	addr, st := testServer(t)
	var b strings.Builder
	b.WriteString("email,name\n")
	line, bad := 1, map[int]bool{}
	for i := range 1200 {
		line++
		if i >= 1000 && i < 1060 {
			fmt.Fprintf(&b, "user%d-at-example.org,User %d\n", i, i)
			bad[line] = true
			continue
		}
		fmt.Fprintf(&b, "user%d@example.org,User %d\n", i, i)
	}
	out, err := rangecast(t, b.String(), "--addr", addr, "contacts", "import", "-")
	if rej := (errRejected{}); !errors.As(err, &rej) || rej.rejected != 60 || rej.imported != 1140 {
		t.Fatalf("import: error %v, want 60 rejected, 1140 imported", err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if lines[0] != "imported 1140 contacts; 60 rows rejected" {
		t.Errorf("summary %q", lines[0])
	}
	// Every rejected row is printed.
	if len(lines) != 1+60 {
		t.Errorf("%d lines of output, want the summary and 60 rejections", len(lines))
	}
	for i, l := range lines[1:] {
		// Rows 1000.. are on lines 1002..
		want := fmt.Sprintf("  line %d: user%d-at-example.org: ", 1002+i, 1000+i)
		if !strings.HasPrefix(l, want) {
			t.Errorf("output line %q, want it to start with %q", l, want)
		}
	}
	if n := len(eligible(t, st, 0)); n != 1140 {
		t.Errorf("%d contacts stored, want 1140", n)
	}
}

func TestContactsImportCommandErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// No server is needed: these fail before anything is sent. The address
	// is one nobody listens on.
	addr := "127.0.0.1:1"
	if _, err := rangecast(t, "", "--addr", addr, "contacts", "import", filepath.Join(dir, "missing.csv")); err == nil || !strings.Contains(err.Error(), "missing.csv") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := rangecast(t, "", "--addr", addr, "contacts", "import"); err == nil {
		t.Error("import without a file succeeded")
	}
	// Unreachable coordinator: an error, not a hang.
	file := writeFile(t, "c.csv", "email,name\nann@example.org,Ann\n")
	if _, err := rangecast(t, "", "--addr", addr, "contacts", "import", file); err == nil {
		t.Error("import with no coordinator succeeded")
	}
	addr2, _ := testServer(t)
	bad := writeFile(t, "bad.csv", "name,city\nAnn,Oslo\n")
	if _, err := rangecast(t, "", "--addr", addr2, "contacts", "import", bad); err == nil || !strings.Contains(err.Error(), "no email column") {
		t.Errorf("header without an email column: %v", err)
	}
}

func TestBroadcastsCreateCommandErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := []string{"--addr", "127.0.0.1:1", "broadcasts", "create", "--name", "News", "--from", "news@example.com", "--subject", "Hi"}
	missing := filepath.Join(dir, "missing.html")
	_, err := rangecast(t, "", append(base, "--html", missing)...)
	if err == nil || !strings.Contains(err.Error(), "--html") || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing --html file: %v, want an error naming --html and the file", err)
	}
	html := writeFile(t, "news.html", "<p>Hi</p>")
	_, err = rangecast(t, "", append(base, "--html", html, "--text", filepath.Join(dir, "missing.txt"))...)
	if err == nil || !strings.Contains(err.Error(), "--text") {
		t.Errorf("missing --text file: %v, want an error naming --text", err)
	}
	_, err = rangecast(t, "", base...)
	if err == nil || !strings.Contains(err.Error(), `"html"`) {
		t.Errorf("no --html flag: %v, want cobra's required-flag error naming html", err)
	}
}

// TestImportUnbalancedQuote: a quote that is opened and never closed, or
// closed many lines later, made the reader take the rows after it as one
// field. Unclosed, the summary said "the other 99 rows were imported" of a
// 10,000-row file, as if the file ended there; closed 20 lines on, the 19
// rows in between became one contact's attribute, and the import
// succeeded. Both are refused, naming the lines lost, and --multiline
// accepts a value that really holds line breaks.
func TestImportUnbalancedQuote(t *testing.T) {
	t.Parallel()
	addr, st := testServer(t)
	var unclosed, swallowed strings.Builder
	unclosed.WriteString("email,name\n")
	swallowed.WriteString("email,name,note\n")
	for i := 1; i <= 300; i++ {
		switch i {
		case 100:
			fmt.Fprintf(&unclosed, "\"uq%d@example.org,Unclosed\n", i)
			fmt.Fprintf(&swallowed, "sw%d@example.org,S %d,\"opened\n", i, i)
		case 120:
			fmt.Fprintf(&unclosed, "uq%d@example.org,U %d\n", i, i)
			fmt.Fprintf(&swallowed, "sw%d@example.org,S %d,closed\"\n", i, i)
		default:
			fmt.Fprintf(&unclosed, "uq%d@example.org,U %d\n", i, i)
			fmt.Fprintf(&swallowed, "sw%d@example.org,S %d,n\n", i, i)
		}
	}
	out, err := rangecast(t, unclosed.String(), "--addr", addr, "contacts", "import", "-")
	if rej := (errRejected{}); !errors.As(err, &rej) || rej.imported != 99 {
		t.Fatalf("unclosed quote: error %v, want rows rejected and 99 imported\n%s", err, out)
	}
	if !strings.Contains(out, "line 101: ") || !strings.Contains(out, "lines 101–301 were read as one row, so none of them was imported; a quote opened there is never closed") {
		t.Errorf("unclosed quote: the output does not say which lines were lost:\n%s", out)
	}

	out, err = rangecast(t, swallowed.String(), "--addr", addr, "contacts", "import", "-")
	if rej := (errRejected{}); !errors.As(err, &rej) || rej.rejected != 1 || rej.imported != 279 {
		t.Fatalf("quote closed 20 lines on: error %v, want 1 rejected, 279 imported\n%s", err, out)
	}
	if !strings.Contains(out, "line 101: a quoted field runs over 21 lines (to line 121), so lines 101–121 were read as this one row") ||
		!strings.Contains(out, "--multiline") {
		t.Errorf("quote closed 20 lines on: the output does not name the lines and the flag:\n%s", out)
	}
	if _, err := st.ContactByEmail(context.Background(), "sw100@example.org"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the row that swallowed the next 20 was stored: %v", err)
	}

	// With --multiline, a value with a line break is a value.
	out, err = rangecast(t, "email,name,address\nml@example.org,Ml,\"1 Main St\nSpringfield\"\n", "--addr", addr, "contacts", "import", "--multiline", "-")
	if err != nil {
		t.Fatalf("--multiline: %v\n%s", err, out)
	}
	if c, err := st.ContactByEmail(context.Background(), "ml@example.org"); err != nil || c.Attributes["address"] != "1 Main St\nSpringfield" {
		t.Errorf("--multiline: stored %+v, %v", c, err)
	}
}

// With --multiline, a stray quote swallowing the rows after it is not one
// contact with a long attribute: a continuation line that reads as a
// contact row of its own refuses the record, naming the lines (tester: 2 of
// 5 imported, exit 0, no word). A value whose lines are not rows is kept.
func TestMultilineRefusesSwallowedRows(t *testing.T) {
	t.Parallel()
	src := "email,name,note\n" + // 1
		"ml1@example.org,A,\"open quote here\n" + // 2
		"ml2@example.org,B,x\n" + // 3
		"ml3@example.org,C,y\n" + // 4
		"ml4@example.org,D,closing here\"\n" + // 5
		"ml5@example.org,E,z\n" + // 6
		"ml6@example.org,F,\"a note, with a comma\nover two lines\"\n" // 7-8
	res, rows, _, err := collect(t, src)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.GetEmail())
	}
	if !slices.Equal(got, []string{"ml5@example.org", "ml6@example.org"}) {
		t.Errorf("rows sent %v; want ml5 and ml6 (ml1's record swallowed ml2-ml4)", got)
	}
	if len(res.rejected) != 1 || !strings.HasPrefix(res.rejected[0], "line 2: a quoted field runs over 4 lines (to line 5), and line 3 inside it reads as a contact row of its own (ml2@example.org)") {
		t.Errorf("rejected %q; want line 2 naming line 3's row", res.rejected)
	}
}

// TestImportSegmentTakenLiterally: --segment names one segment as written,
// commas included (a slice flag made 'a,b' two segments), and a name the
// coordinator would refuse on every row is refused once, before anything
// is imported.
func TestImportSegmentTakenLiterally(t *testing.T) {
	t.Parallel()
	addr, st := testServer(t)
	csv := "email\nann@example.org\n"
	if out, err := rangecast(t, csv, "--addr", addr, "contacts", "import", "--segment", "a,b", "--segment", "c", "-"); err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	for name, want := range map[string]bool{"a,b": true, "c": true, "a": false, "b": false} {
		_, err := st.SegmentID(context.Background(), name)
		if got := err == nil; got != want {
			t.Errorf("segment %q exists: %v, want %v (%v)", name, got, want, err)
		}
	}
	for _, bad := range []string{"bad\nname", " lead", "", strings.Repeat("s", 300)} {
		out, err := rangecast(t, csv, "--addr", addr, "contacts", "import", "--segment", bad, "-")
		if err == nil || !strings.Contains(err.Error(), "--segment: ") || !strings.Contains(err.Error(), "nothing was imported") {
			t.Errorf("--segment %q: %v\n%s; want it refused up front", bad, err, out)
		}
	}
}

// TestImportStoppedSaysWhatToDo: an import whose coordinator goes away
// mid-stream printed only "error: EOF" (gRPC gives the stream's status to
// the receive, not the send). It says the import stopped, how many rows
// were sent, and that importing again is safe.
func TestImportStoppedSaysWhatToDo(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	printError(&b, importStopped{sent: 5000, err: status.Error(codes.Unavailable, "error reading from server: EOF")})
	got := b.String()
	for _, want := range []string{"error: the import stopped before it finished (the connection to the coordinator was lost: error reading from server: EOF)", "up to 5000 rows sent may have been imported", "import the file again"} {
		if !strings.Contains(got, want) {
			t.Errorf("printed %q; want it to say %q", got, want)
		}
	}
	if strings.Contains(got, "TLS") {
		t.Errorf("printed %q: a hint for a connection that never was", got)
	}
	// What the coordinator answered is its own message (found by review:
	// a bad token said "import the file again once the coordinator
	// answers").
	for _, err := range []error{
		status.Error(codes.Unauthenticated, "invalid bearer token"),
		status.Error(codes.InvalidArgument, "a row is too large"),
	} {
		if got := stopped(3, err); got != err {
			t.Errorf("stopped(%v) = %v; want the coordinator's answer as it is", err, got)
		}
	}
}

// TestImportStreamCutMidway: the coordinator stops while a file is being
// imported; the command fails saying so (it printed "error: EOF").
func TestImportStreamCutMidway(t *testing.T) {
	t.Parallel()
	addr, st, stop := stoppableServer(t)

	pr, pw := io.Pipe()
	cmd := Rangecast()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(pr)
	cmd.SetArgs([]string{"--addr", addr, "contacts", "import", "-"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	row := 0
	write := func(n int) {
		for range n {
			row++
			if _, err := fmt.Fprintf(pw, "cut%d@example.org\n", row); err != nil {
				return // the command gave up reading
			}
		}
	}
	fmt.Fprintln(pw, "email")
	write(6000) // more than a store batch (api importBatch), so some are stored
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := st.ContactByEmail(ctx, "cut1@example.org"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no row imported in 10 s")
		}
	}
	stop()
	go func() {
		write(5000)
		pw.Close()
	}()
	err := <-done
	pr.Close() // the command stopped reading: unblock the writer
	var b2 strings.Builder
	printError(&b2, err)
	if got := b2.String(); !strings.Contains(got, "the import stopped before it finished") || !strings.Contains(got, "import the file again") {
		t.Errorf("printed %q; want it to say the import stopped and what to do", got)
	}
	t.Logf("printed: %s", b2.String())
}

// TestImportSaysWhoWasErasedBefore: an address erased before is imported
// as a suppressed contact, never mailed; the import says how many, where
// it said only "imported" (tester).
func TestImportSaysWhoWasErasedBefore(t *testing.T) {
	t.Parallel()
	addr, st := testServer(t)
	if _, err := st.Erase(context.Background(), []string{"zoe@example.org"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, "contacts.csv", "email,name\nZoe@Example.org,Zoe\nann@example.org,Ann\n")
	out, err := rangecast(t, "", "--addr", addr, "contacts", "import", file)
	if err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	want := "imported 2 contacts; 0 rows rejected\n  1 of them was erased before (GDPR Art. 17): kept suppressed, never mailed\n"
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
	out, err = rangecast(t, "", "--addr", addr, "contacts", "import", "--json", file)
	if err != nil || !strings.Contains(out, `"erasedBefore":1`) {
		t.Errorf("import --json: %v\n%s; want erasedBefore 1", err, out)
	}
}
