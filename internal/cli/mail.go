package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rangecast/rangecast/internal/capture"
)

// mailCommand reads what rangecast dev's capture server kept. It reads the
// folder directly, so it works whether or not dev is running.
func mailCommand() *cobra.Command {
	var dir string
	var asJSON bool
	cmd := &cobra.Command{Use: "mail", Short: "Read the mail rangecast dev captured"}
	cmd.PersistentFlags().StringVar(&dir, "dir", ".rangecast", "the folder rangecast dev runs in")
	list := &cobra.Command{
		Use: "list", Short: "List captured messages, oldest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			msgs, err := capture.ReadDir(filepath.Join(dir, "mail"))
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				type row struct {
					ID        int       `json:"id"`
					MessageID string    `json:"message_id"`
					To        []string  `json:"to"`
					Subject   string    `json:"subject"`
					Received  time.Time `json:"received"`
				}
				rows := make([]row, 0, len(msgs))
				for _, m := range msgs {
					rows = append(rows, row{m.Seq, m.MessageID, m.To, m.Subject, m.Received})
				}
				return printJSON(out, rows)
			}
			if len(msgs) == 0 {
				if _, err := os.Stat(dir); err != nil {
					return fmt.Errorf("no %s folder here: run this where rangecast dev runs, or pass --dir", dir)
				}
				fmt.Fprintf(out, "no mail captured in %s yet\n", filepath.Join(dir, "mail"))
				return nil
			}
			fmt.Fprintf(out, "%6s  %-19s  %-32s  %s\n", "ID", "RECEIVED", "TO", "SUBJECT")
			for _, m := range msgs {
				fmt.Fprintf(out, "%6d  %-19s  %-32s  %s\n", m.Seq, m.Received.Local().Format(time.DateTime), shownText(strings.Join(m.To, ",")), shownText(m.Subject))
			}
			return nil
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	show := &cobra.Command{
		Use: "show ID", Short: "Print one captured message as received (ID from mail list, or its Message-ID)", Args: cobra.ExactArgs(1),
		Long: `Print one captured message as received: byte for byte to a file or a pipe,
and to a terminal line by line with control characters and invalid UTF-8
made visible (\x1b, \u202e, U+FFFD), so a message cannot drive the terminal.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			msgs, err := capture.ReadDir(filepath.Join(dir, "mail"))
			if err != nil {
				return err
			}
			seq, _ := strconv.Atoi(args[0])
			for _, m := range msgs {
				if m.Seq == seq || m.MessageID == strings.Trim(args[0], "<>") {
					out := cmd.OutOrStdout()
					return writeMessage(out, m.Raw, isTerminal(out))
				}
			}
			return fmt.Errorf("no captured message %q in %s (see rangecast mail list)", args[0], filepath.Join(dir, "mail"))
		},
	}
	cmd.AddCommand(list, show)
	return cmd
}

// shownText is shown for text that may also hold invalid UTF-8 (a
// message's 8-bit bytes): a stray byte such as 0x9b, which an 8-bit
// terminal takes for CSI, is written as U+FFFD.
func shownText(s string) string {
	return shown(strings.ToValidUTF8(s, "\ufffd"))
}

// writeMessage writes a captured message: as received when the output is
// not a terminal (mail show 1 > m.eml keeps it byte for byte), and to a
// terminal one line at a time through shownText, CRLF as a line break.
func writeMessage(w io.Writer, raw []byte, terminal bool) error {
	if !terminal {
		_, err := w.Write(raw)
		return err
	}
	var b strings.Builder
	for line := range strings.Lines(string(raw)) {
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		b.WriteString(shownText(line))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
