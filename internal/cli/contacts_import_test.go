package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"google.golang.org/protobuf/proto"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// TestReadCSVMapsColumnsByHeader: each column is what its header says,
// wherever it stands; the documented email,name,… order reads as before.
func TestReadCSVMapsColumnsByHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		src   string
		name  string
		attrs map[string]string
	}{
		{"email,name,city\nann@example.org,Ann Smith,Oslo\n", "Ann Smith", map[string]string{"city": "Oslo"}},
		{"email,city,name\nann@example.org,Oslo,Ann Smith\n", "Ann Smith", map[string]string{"city": "Oslo"}},
		{"city,name,email\nOslo,Ann Smith,ann@example.org\n", "Ann Smith", map[string]string{"city": "Oslo"}},
		{"\ufeff City , NAME ,Email,plan\nOslo, Ann Smith , ann@example.org ,pro\n", "Ann Smith", map[string]string{"City": "Oslo", "plan": "pro"}},
		{"plan,email\npro,ann@example.org\n", "", map[string]string{"plan": "pro"}},
		{"email\nann@example.org\n", "", nil},
	} {
		res, rows, _, err := collect(t, tc.src)
		if err != nil {
			t.Errorf("%q: %v", tc.src, err)
			continue
		}
		if len(rows) != 1 || len(res.rejected) != 0 {
			t.Errorf("%q: %d rows sent, rejected %v; want the one row", tc.src, len(rows), res.rejected)
			continue
		}
		r := rows[0]
		if r.GetEmail() != "ann@example.org" || r.GetName() != tc.name || !maps.Equal(r.GetAttributes(), tc.attrs) {
			t.Errorf("%q: sent email %q name %q attributes %v; want ann@example.org, %q, %v",
				tc.src, r.GetEmail(), r.GetName(), r.GetAttributes(), tc.name, tc.attrs)
		}
	}
}

// TestReadCSVRefusesAmbiguousHeader: a header that would misplace or lose
// data, or that every row would be rejected for, is refused before any row
// is sent, with an error naming what is wrong.
func TestReadCSVRefusesAmbiguousHeader(t *testing.T) {
	t.Parallel()
	manyColumns := "email"
	for i := range maxImportAttributes + 1 {
		manyColumns += fmt.Sprintf(",a%d", i)
	}
	for src, want := range map[string]string{
		"name,city\nAnn,Oslo\n":                                 "no email column",
		"e-mail,name\nann@example.org,Ann\n":                    `no email column (its columns: "e-mail", "name")`,
		"email;name\nann@example.org;Ann\n":                     `look separated by ";"`,
		"email,city,city\nann@example.org,Oslo,Rome\n":          `names two columns "city" (columns 2 and 3)`,
		"email,City,name,CITY\nann@example.org,Oslo,Ann,Rome\n": `names two columns "City" and "CITY" (columns 2 and 4), the same but for case`,
		"email,Email\nann@example.org,bob@example.org\n":        `names two columns "email" and "Email" (columns 1 and 2), the same but for case`,
		"email,name,name\nann@example.org,Ann,Anna\n":           `names two columns "name"`,
		"email,name,\nann@example.org,Ann,\n":                   "column 3 of the CSV header is empty",
		"email, ,city\nann@example.org,x,Oslo\n":                "column 2 of the CSV header is empty",
		"email,\"ci\nty\"\nann@example.org,Oslo\n":              "column 2 of the CSV header, \"ci\\nty\", contains a tab, line break",
		"email\tname\nann@example.org\tAnn\n":                   "contains a tab, line break",
		"email," + strings.Repeat("x", 129) + "\na@b.org,1\n":   "is 129 characters; an attribute name may have at most 128",
		manyColumns + "\n":                                      "65 attribute columns; a contact may have at most 64",
	} {
		_, rows, _, err := collect(t, src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("header of %q: error %v, want one containing %q", src, err, want)
		}
		if len(rows) != 0 {
			t.Errorf("header of %q: %d rows sent despite the error", src, len(rows))
		}
	}
}

// TestReadCSVLineEndings: lines ending in CR alone (classic Mac OS, some
// Excel exports) read as lines, however the input arrives; LF and CRLF
// files are read as they are, a CR inside a quoted field included.
func TestReadCSVLineEndings(t *testing.T) {
	t.Parallel()
	type sent struct {
		lines []int
		rows  []string // email|name|city
	}
	readers := map[string]func(string) io.Reader{
		"whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"halves":   func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
	}
	for _, tc := range []struct {
		src  string
		want sent
	}{
		{"email,name,city\rann@example.org,Ann,Oslo\rbob@example.org,Bob,Rome\r",
			sent{[]int{2, 3}, []string{"ann@example.org|Ann|Oslo", "bob@example.org|Bob|Rome"}}},
		{"email,name,city\rann@example.org,\"Ann\rSmith\",Oslo\r\rbob@example.org,Bob,Rome",
			sent{[]int{2, 5}, []string{"ann@example.org|Ann\nSmith|Oslo", "bob@example.org|Bob|Rome"}}},
		{"email,name,city\r\nann@example.org,Ann,\"Os\rlo\"\r\nbob@example.org,Bob,Rome\r\n",
			sent{[]int{2, 3}, []string{"ann@example.org|Ann|Os\rlo", "bob@example.org|Bob|Rome"}}},
		{"email,name,city\nann@example.org,Ann,\"Os\rlo\"\nbob@example.org,Bob,Rome\n",
			sent{[]int{2, 3}, []string{"ann@example.org|Ann|Os\rlo", "bob@example.org|Bob|Rome"}}},
	} {
		for how, reader := range readers {
			var got sent
			res, err := readCSV(reader(tc.src), nil, true, func(rows []*pb.ContactRow) error {
				for _, r := range rows {
					got.rows = append(got.rows, r.GetEmail()+"|"+r.GetName()+"|"+r.GetAttributes()["city"])
				}
				return nil
			})
			if err != nil {
				t.Errorf("%q (%s): %v", tc.src, how, err)
				continue
			}
			got.lines = res.lines
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || len(res.rejected) != 0 {
				t.Errorf("%q (%s): sent %+q, rejected %v; want %+q", tc.src, how, got.rows, res.rejected, tc.want.rows)
				t.Errorf("lines %v, want %v", got.lines, tc.want.lines)
			}
		}
	}
}

// wideCSV is rows rows of attrs attributes of 2,048 characters each: within every
// per-field limit.
func wideCSV(rows, attrs int) string {
	var b strings.Builder
	b.WriteString("email,name")
	for i := range attrs {
		fmt.Fprintf(&b, ",attr%d", i)
	}
	b.WriteString("\n")
	value := strings.Repeat("v", maxImportAttrValue)
	for r := range rows {
		fmt.Fprintf(&b, "user%d@example.org,User %d", r, r)
		for range attrs {
			b.WriteString("," + value)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestReadCSVChunksByBytes: wide rows go in chunks of about
// importChunkBytes, far below gRPC's default 4 MiB limit, not 500 rows
// whatever their size.
func TestReadCSVChunksByBytes(t *testing.T) {
	t.Parallel()
	var sizes, counts []int
	res, err := readCSV(strings.NewReader(wideCSV(40, 62)), nil, false, func(rows []*pb.ContactRow) error {
		sizes = append(sizes, proto.Size(&pb.ImportContactsRequest{Rows: rows}))
		counts = append(counts, len(rows))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.lines) != 40 || len(res.rejected) != 0 {
		t.Fatalf("%d rows sent, rejected %v; want all 40", len(res.lines), res.rejected)
	}
	total := 0
	for i, size := range sizes {
		total += counts[i]
		// A row's own framing is a few bytes past what readCSV counts.
		if size > importChunkBytes+counts[i]*8 {
			t.Errorf("chunk %d: %d rows in %d bytes, want at most about %d", i, counts[i], size, importChunkBytes)
		}
	}
	if total != 40 || len(sizes) < 5 {
		t.Errorf("chunks of %v rows (%v bytes), want the 40 rows over at least 5 chunks", counts, sizes)
	}
}

// TestReadCSVRowTooLarge: a row larger than a chunk may carry is rejected
// by the reader with its line and the field over its limit; the rows
// around it are sent, with their lines.
func TestReadCSVRowTooLarge(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 3<<20)
	src := "email,name,bio\n" +
		"ann@example.org,Ann,hi\n" + // 2
		"bob@example.org," + big + ",hi\n" + // 3
		"cat@example.org,Cat," + big + "\n" + // 4
		big + "@example.org,Dan,hi\n" + // 5
		"eve@example.org,Eve,hi\n" // 6
	res, rows, chunks, err := collect(t, src)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || fmt.Sprint(res.lines) != "[2 6]" || fmt.Sprint(chunks) != "[2]" {
		t.Errorf("sent lines %v in chunks %v, want lines 2 and 6 in one chunk", res.lines, chunks)
	}
	want := []string{
		fmt.Sprintf("line 3: name is %d characters; at most 256 are allowed", len(big)),
		fmt.Sprintf(`line 4: attribute "bio" is %d characters; at most 2048 are allowed`, len(big)),
		fmt.Sprintf("line 5: email is %d characters; at most 254 are allowed", len(big)+len("@example.org")),
	}
	if fmt.Sprint(res.rejected) != fmt.Sprint(want) {
		t.Errorf("rejected:\n  %s\nwant:\n  %s", strings.Join(res.rejected, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestContactsImportCommandWideRows: rows within every per-field limit are
// imported however wide, and one too large to send is reported with its
// line and field, instead of the stream failing with ResourceExhausted.
func TestContactsImportCommandWideRows(t *testing.T) {
	t.Parallel()
	addr, st := testServer(t)
	out, err := rangecast(t, "", "--addr", addr, "contacts", "import", writeFile(t, "wide.csv", wideCSV(40, 62)))
	if err != nil || !strings.HasPrefix(out, "imported 40 contacts; 0 rows rejected\n") {
		t.Fatalf("import of 40 wide rows: %v\n%.300s", err, out)
	}
	if n := len(eligible(t, st, 0)); n != 40 {
		t.Errorf("%d contacts stored, want 40", n)
	}

	big := strings.Repeat("x", 5<<20)
	file := writeFile(t, "big.csv", "email,name,city\n"+
		"ann@example.org,Ann,Oslo\n"+
		"bob@example.org,"+big+",Rome\n"+
		"cat@example.org,Cat,Lima\n")
	out, err = rangecast(t, "", "--addr", addr, "contacts", "import", file)
	if rej := (errRejected{}); !errors.As(err, &rej) || rej.rejected != 1 || rej.imported != 2 {
		t.Fatalf("import with a 5 MiB name: error %v, want 1 rejected, 2 imported\n%.300s", err, out)
	}
	want := fmt.Sprintf("imported 2 contacts; 1 row rejected\n  line 3: name is %d characters; at most 256 are allowed\n", len(big))
	if out != want {
		t.Errorf("output %q, want %q", out, want)
	}
}

// TestContactsImportCommandLineEndings: a file with CR line endings imports
// its rows; a file with a header and no rows says so.
func TestContactsImportCommandLineEndings(t *testing.T) {
	t.Parallel()
	addr, st := testServer(t)
	file := writeFile(t, "mac.csv", "email,name,city\rann@example.org,Ann,Oslo\rbob@example.org,Bob,Rome\r")
	out, err := rangecast(t, "", "--addr", addr, "contacts", "import", file)
	if err != nil || out != "imported 2 contacts; 0 rows rejected\n" {
		t.Fatalf("import of a CR-only file: %v\n%s", err, out)
	}
	if got := eligible(t, st, 0); got["bob@example.org"].Name != "Bob" {
		t.Errorf("contacts stored: %v", got)
	}
	// An address only a relay with SMTPUTF8 can deliver to is imported,
	// and the import says so.
	utf8 := writeFile(t, "utf8.csv", "email,name\njöran@example.org,Jöran\nm@bücher.example,M\n")
	if out, err := rangecast(t, "", "--addr", addr, "contacts", "import", utf8); err != nil ||
		!strings.Contains(out, "note: 1 imported address has a non-ASCII local part (jöran@example.org): only a relay offering SMTPUTF8 can deliver to them\n") {
		t.Errorf("import of a non-ASCII local part: %v\n%s", err, out)
	}
	// A row the server rejects (here a repeat) is not counted in the note.
	repeat := writeFile(t, "utf8-repeat.csv", "email,name\nåsa@example.org,Åsa\nÅSA@example.org,Åsa\nöla@example.org,Öla\n")
	if out, err := rangecast(t, "", "--addr", addr, "contacts", "import", repeat); err == nil ||
		!strings.Contains(out, "note: 2 imported addresses have a non-ASCII local part (åsa@example.org, öla@example.org):") || !strings.Contains(out, "line 3: ÅSA@example.org: duplicate of line 2") {
		t.Errorf("import of a non-ASCII local part twice: %v\n%s", err, out)
	}
	// Imported again with one new row: the output tells new from updated.
	again := writeFile(t, "again.csv", "email,name,city\nann@example.org,Ann,Oslo\nBOB@example.org,Bob,Rome\ncat@example.org,Cat,Lima\n")
	if out, err := rangecast(t, "", "--addr", addr, "contacts", "import", again); err != nil || out != "imported 3 contacts (1 new, 2 updated); 0 rows rejected\n" {
		t.Errorf("import of two known addresses and a new one: %v\n%s", err, out)
	}
	if out, err := rangecast(t, "", "--addr", addr, "contacts", "import", again, "--json"); err != nil || !strings.Contains(out, `"imported":3,"updated":3,`) {
		t.Errorf("the same import again, --json: %v\n%s", err, out)
	}
	// A file without a name column says so: its second column is an
	// attribute now, where it used to be taken for the name.
	noName := writeFile(t, "full_name.csv", "email,full_name\ncy@example.org,Cy Young\n")
	out, err = rangecast(t, "", "--addr", addr, "contacts", "import", noName)
	if err != nil || !strings.Contains(out, "has no column headed name") {
		t.Errorf("import without a name column: %v\n%s", err, out)
	}
	empty := writeFile(t, "empty.csv", "email,name,city\n\n")
	out, err = rangecast(t, "", "--addr", addr, "contacts", "import", empty)
	if err != nil || !strings.Contains(out, empty+" has a header row but no contact rows: nothing was imported") {
		t.Errorf("import of a header alone: %v\n%s", err, out)
	}
}

// TestBroadcastsCreateCommandLargeHTML: an HTML body over the template limit
// but over gRPC's default 4 MiB too reaches the server's own validation,
// which names the field and the limit.
func TestBroadcastsCreateCommandLargeHTML(t *testing.T) {
	t.Parallel()
	addr, _ := testServer(t)
	html := filepath.Join(t.TempDir(), "big.html")
	body := `<p><a href="{{.UnsubscribeURL}}">Unsubscribe</a></p>` + strings.Repeat("<p>news</p>\n", 5_000_000/12)
	if err := os.WriteFile(html, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := rangecast(t, "", "--addr", addr, "broadcasts", "create", "--name", "News", "--from", "news@example.com",
		"--subject", "Hi", "--html", html)
	if err == nil || !strings.Contains(describe(err), "at most 524288") || !strings.Contains(describe(err), "html") {
		t.Errorf("create with a 5 MB --html: %v, want the server's answer naming html and its 524288-byte limit", err)
	}
}

// TestContactsListNegativeLimit: a negative --limit is refused, naming the
// flag, instead of reading as no limit.
func TestContactsListNegativeLimit(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"contacts", "list"}, {"segments", "list"}, {"broadcasts", "list"}} {
		_, err := rangecast(t, "", append([]string{"--addr", "127.0.0.1:1"}, append(args, "--limit", "-1")...)...)
		if err == nil || !strings.Contains(err.Error(), "--limit") || !strings.Contains(err.Error(), "-1") {
			t.Errorf("%s --limit -1: %v, want an error naming --limit", strings.Join(args, " "), err)
		}
	}
}

// TestContactsImportReadsWhoMayNotBeMailed: columns headed unsubscribed,
// do_not_contact or subscribed are read, not stored as attributes, so a
// list exported with its unsubscribes marked does not come in as people
// to mail (a tester's "unsubscribed,true" row was imported subscribed); a
// value that is neither yes nor no rejects its row; import never
// re-subscribes anyone; a column that looks like consent but is not read
// (status) is named in a note.
func TestContactsImportReadsWhoMayNotBeMailed(t *testing.T) {
	t.Parallel()
	addr, st := testServer(t)
	file := writeFile(t, "flags.csv", "email,name,Unsubscribed,do not contact,subscribed,status\n"+
		"a@example.org,A,true,,,unsubscribed\n"+
		"b@example.org,B,no,yes,,active\n"+
		"c@example.org,C,,,false,\n"+
		"d@example.org,D,0,0,1,active\n"+
		"e@example.org,E,maybe,,,\n"+
		"f@example.org,F,,,,\n")
	out, err := rangecast(t, "", "--addr", addr, "contacts", "import", file)
	if err == nil || !strings.Contains(out, "imported 5 contacts; 1 row rejected") || !strings.Contains(out, `line 6: Unsubscribed is "maybe": give true or false`) {
		t.Errorf("import with flag columns: %v\n%s", err, out)
	}
	if !strings.Contains(out, `note: status is an attribute, not read as who may be mailed`) {
		t.Errorf("no note about the status column:\n%s", out)
	}
	got := eligible(t, st, 0)
	if len(got) != 2 || got["d@example.org"].Email == "" || got["f@example.org"].Email == "" {
		t.Errorf("eligible after import: %v; want d and f only", got)
	}
	if a := got["d@example.org"].Attributes; a["Unsubscribed"] != nil || a["subscribed"] != nil || a["status"] != "active" {
		t.Errorf("d's attributes %v: the flags are not attributes, status is", a)
	}
	// Marked unsubscribed=false again, a contact stays unsubscribed.
	again := writeFile(t, "again.csv", "email,unsubscribed\na@example.org,false\n")
	if _, err := rangecast(t, "", "--addr", addr, "contacts", "import", again); err != nil {
		t.Fatal(err)
	}
	if _, ok := eligible(t, st, 0)["a@example.org"]; ok {
		t.Error("an import with unsubscribed=false re-subscribed a")
	}
}
