package cli

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// importChunk is how many rows travel in one stream message.
const importChunk = 500

// maxShownErrors bounds the rejected rows printed; the count is always shown.
const maxShownErrors = 50

func contactsCommand(c *client) *cobra.Command {
	cmd := &cobra.Command{Use: "contacts", Short: "Import and manage contacts"}
	var segments []string
	imp := &cobra.Command{
		Use:   "import FILE.csv",
		Short: "Import contacts from CSV (header: email,name, then attribute columns; - reads stdin)",
		Long: `Import contacts from a CSV file with a header row. The first two columns are
email and name; every further column becomes an attribute usable in templates
as {{.Attributes.column}}. Contacts are matched by email, case-insensitively:
an existing contact keeps its id, its name is replaced and attributes merged.
An import never re-subscribes someone who unsubscribed.

Rows that cannot be imported are reported with their line numbers; every other
row is imported. The file is streamed, so millions of rows work.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var in io.Reader = cmd.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			ac, err := c.audience()
			if err != nil {
				return err
			}
			stream, err := ac.ImportContacts(cmd.Context())
			if err != nil {
				return err
			}
			res, err := readCSV(in, segments, func(rows []*pb.ContactRow) error {
				return stream.Send(&pb.ImportContactsRequest{Rows: rows})
			})
			if err != nil {
				stream.CloseSend() //nolint:errcheck
				return err
			}
			resp, err := stream.CloseAndRecv()
			if err != nil {
				return err
			}
			for _, e := range resp.GetErrors() {
				res.rejected = append(res.rejected, fmt.Sprintf("line %d: %s: %s", res.line(e.GetRow()), e.GetEmail(), res.serverError(e.GetError())))
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "imported %d %s; %d %s rejected\n", resp.GetImported(), plural(resp.GetImported(), "contact", "contacts"),
				len(res.rejected), plural(int64(len(res.rejected)), "row", "rows"))
			// The reader's and the server's rejections arrive separately; a
			// person reads them in file order.
			slices.SortStableFunc(res.rejected, func(a, b string) int { return cmp.Compare(lineOf(a), lineOf(b)) })
			for i, r := range res.rejected {
				if i == maxShownErrors {
					fmt.Fprintf(out, "  … and %d more\n", len(res.rejected)-maxShownErrors)
					break
				}
				fmt.Fprintln(out, "  "+r)
			}
			return nil
		},
	}
	imp.Flags().StringSliceVar(&segments, "segment", nil, "also add every imported contact to this segment (repeatable)")
	cmd.AddCommand(imp)
	return cmd
}

type csvResult struct {
	lines    []int // file line of each row sent, so server row numbers map back
	rejected []string
}

// line is the file line of the server's row number (counted from 1 over
// the rows sent), or the row number itself if it is out of range.
func (res *csvResult) line(row int64) int64 {
	if row < 1 || row > int64(len(res.lines)) {
		return row
	}
	return int64(res.lines[row-1])
}

// duplicateRow matches the server's rejection of a repeated email, which
// names the first row by its row number in the stream.
var duplicateRow = regexp.MustCompile(`^duplicate of row (\d+)$`)

// serverError rewrites row numbers in a server rejection as file lines.
func (res *csvResult) serverError(msg string) string {
	if m := duplicateRow.FindStringSubmatch(msg); m != nil {
		if row, err := strconv.ParseInt(m[1], 10, 64); err == nil {
			return fmt.Sprintf("duplicate of line %d", res.line(row))
		}
	}
	return msg
}

func allValidUTF8(fields []string) bool {
	for _, f := range fields {
		if !utf8.ValidString(f) {
			return false
		}
	}
	return true
}

// readCSV streams rows to send in chunks. Rows the CSV reader itself cannot
// make sense of are rejected here with their line; all others go to the
// server, which reports its own rejections by row number.
func readCSV(in io.Reader, segments []string, send func([]*pb.ContactRow) error) (*csvResult, error) {
	r := csv.NewReader(in)
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the CSV is empty: it needs a header row (email,name, then attribute columns) and then one contact per line")
		}
		return nil, fmt.Errorf("read CSV header: %w", err)
	}
	header = append([]string(nil), header...)
	for i := range header {
		header[i] = strings.TrimSpace(header[i])
	}
	if !allValidUTF8(header) {
		return nil, errors.New("the CSV header is not valid UTF-8; save the file as UTF-8")
	}
	if len(header) < 1 || !strings.EqualFold(strings.TrimSpace(strings.TrimPrefix(header[0], "\ufeff")), "email") {
		return nil, errors.New("the CSV header must start with email (then name, then attribute columns)")
	}
	res := &csvResult{}
	var chunk []*pb.ContactRow
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				res.rejected = append(res.rejected, fmt.Sprintf("line %d: %v", pe.StartLine, pe.Err))
				continue
			}
			return nil, err
		}
		// Only after a successful read: after a parse error in the first
		// field there is no field position, and FieldPos panics.
		line, _ := r.FieldPos(0)
		if !allValidUTF8(rec) {
			// gRPC cannot carry it: one such row would fail the whole stream.
			res.rejected = append(res.rejected, fmt.Sprintf("line %d: not valid UTF-8 (save the file as UTF-8)", line))
			continue
		}
		if len(rec) != len(header) {
			res.rejected = append(res.rejected, fmt.Sprintf("line %d: %d columns, the header has %d", line, len(rec), len(header)))
			continue
		}
		row := &pb.ContactRow{Email: strings.TrimSpace(rec[0]), Segments: segments}
		if len(rec) > 1 {
			row.Name = strings.TrimSpace(rec[1])
		}
		if len(rec) > 2 {
			row.Attributes = make(map[string]string, len(rec)-2)
			for i := 2; i < len(rec); i++ {
				row.Attributes[header[i]] = rec[i]
			}
		}
		res.lines = append(res.lines, line)
		chunk = append(chunk, row)
		if len(chunk) == importChunk {
			if err := send(chunk); err != nil {
				return nil, err
			}
			chunk = nil
		}
	}
	if len(chunk) > 0 {
		if err := send(chunk); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// lineOf reads the line number a rejection starts with ("line N: …").
func lineOf(rejection string) int {
	var n int
	fmt.Sscanf(rejection, "line %d", &n) //nolint:errcheck // every rejection is written with that prefix
	return n
}
