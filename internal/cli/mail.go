package cli

import (
	"fmt"
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
				fmt.Fprintf(out, "%6d  %-19s  %-32s  %s\n", m.Seq, m.Received.Local().Format(time.DateTime), strings.Join(m.To, ","), m.Subject)
			}
			return nil
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	show := &cobra.Command{
		Use: "show ID", Short: "Print one captured message as received (ID from mail list, or its Message-ID)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			msgs, err := capture.ReadDir(filepath.Join(dir, "mail"))
			if err != nil {
				return err
			}
			seq, _ := strconv.Atoi(args[0])
			for _, m := range msgs {
				if m.Seq == seq || m.MessageID == strings.Trim(args[0], "<>") {
					_, err := cmd.OutOrStdout().Write(m.Raw)
					return err
				}
			}
			return fmt.Errorf("no captured message %q in %s (see rangecast mail list)", args[0], filepath.Join(dir, "mail"))
		},
	}
	cmd.AddCommand(list, show)
	return cmd
}
