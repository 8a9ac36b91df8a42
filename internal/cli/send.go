package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// sendWait is how long `send --wait` waits for the first attempt: the
// service's bound.
const sendWait = 30 * time.Second

func (c *client) transactional() (pb.TransactionalServiceClient, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	return pb.NewTransactionalServiceClient(conn), nil
}

func sendCommand(c *client) *cobra.Command {
	var to, toName, from, fromName, subject, textFile, htmlFile, key, template, data string
	var headers []string
	var wait, asJSON bool
	cmd := &cobra.Command{
		Use:   "send",
		Short: "Send one transactional message (retried until it lands, never twice)",
		Long: `Send one message to one recipient. The idempotency key makes the command safe
to repeat: the same key, recipient and content return the message already
accepted (and never send a second copy); the same key with different content
is refused. Transient SMTP errors are retried with a growing backoff; the
command prints the message id at once (or, with --wait, the first attempt's
outcome). Follow it with 'rangecast send status ID'.`,
		Example: `  rangecast send --to ann@example.org --from no-reply@example.com \
    --subject "Your password reset" --text reset.txt --idempotency-key reset:ann:42 --wait`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &pb.SendRequest{IdempotencyKey: key, To: to, ToName: toName, FromAddress: from, FromName: fromName, Subject: subject, Template: template}
			switch {
			case template != "" && (subject != "" || textFile != "" || htmlFile != ""):
				return fmt.Errorf("--template renders the subject and bodies; drop --subject, --text and --html")
			case template == "" && data != "":
				return fmt.Errorf("--data is only used with --template")
			case template == "" && (subject == "" || from == ""):
				return fmt.Errorf("give --from and --subject (or --template NAME)")
			case template == "" && textFile == "" && htmlFile == "":
				return fmt.Errorf("give a body: --text FILE, --html FILE, or both (or --template NAME)")
			}
			if data != "" {
				d, err := readData(data)
				if err != nil {
					return err
				}
				req.Data = d
			}
			if textFile != "" {
				b, err := os.ReadFile(textFile)
				if err != nil {
					return fmt.Errorf("--text: %w", err)
				}
				req.Text = string(b)
			}
			if htmlFile != "" {
				b, err := os.ReadFile(htmlFile)
				if err != nil {
					return fmt.Errorf("--html: %w", err)
				}
				req.Html = string(b)
			}
			for _, h := range headers {
				name, value, ok := strings.Cut(h, ":")
				if !ok {
					return fmt.Errorf("--header %q: write it as 'Name: value'", h)
				}
				req.Headers = append(req.Headers, &pb.Header{Name: strings.TrimSpace(name), Value: strings.TrimSpace(value)})
			}
			if wait {
				req.Wait = durationpb.New(sendWait)
			}
			tc, err := c.transactional()
			if err != nil {
				return err
			}
			// The wait happens on the server; leave it room to answer.
			resp, err := tc.Send(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return printProtoJSON(cmd.OutOrStdout(), resp)
			}
			m := resp.GetMessage()
			if !wait {
				note := ""
				if resp.GetReplayed() {
					note = "  (already accepted under this key; nothing new queued)"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s%s\n", m.GetId(), txStatusWord(m.GetStatus()), note)
				return nil
			}
			printMessage(cmd.OutOrStdout(), m)
			// A script waiting for the outcome learns it from the exit
			// status: a message that failed or may not have arrived is not
			// a success.
			switch m.GetStatus() {
			case pb.TransactionalStatus_TRANSACTIONAL_STATUS_FAILED, pb.TransactionalStatus_TRANSACTIONAL_STATUS_UNKNOWN:
				return fmt.Errorf("message %s is %s", m.GetId(), txStatusWord(m.GetStatus()))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&to, "to", "", "recipient address (required)")
	f.StringVar(&toName, "to-name", "", "recipient display name")
	f.StringVar(&from, "from", "", "From address, e.g. no-reply@example.com (required without --template)")
	f.StringVar(&fromName, "from-name", "", "From display name")
	f.StringVar(&subject, "subject", "", "subject line (required without --template)")
	f.StringVar(&textFile, "text", "", "file with the plain-text body")
	f.StringVar(&htmlFile, "html", "", "file with the HTML body (without --text the plain part is derived from it)")
	f.StringVar(&key, "idempotency-key", "", "at most 256 characters; repeating the command with it never sends twice (required)")
	f.StringArrayVar(&headers, "header", nil, "extra header 'Name: value' (repeatable); Message-ID, From, To, Subject, List-* and the like are refused")
	f.StringVar(&template, "template", "", "render a stored template (see 'rangecast send template put') instead of --subject/--text/--html")
	f.StringVar(&data, "data", "", "the template's data: a JSON object, or @FILE to read it from a file")
	f.BoolVar(&wait, "wait", false, "wait (up to 30s) for the first attempt's outcome and print it")
	f.BoolVar(&asJSON, "json", false, "print the response as JSON")
	for _, req := range []string{"to", "idempotency-key"} {
		cmd.MarkFlagRequired(req) //nolint:errcheck
	}
	cmd.AddCommand(sendStatusCommand(c), templateCommand(c))
	return cmd
}

func sendStatusCommand(c *client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "status ID", Short: "Show a transactional message's status and every attempt", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tc, err := c.transactional()
			if err != nil {
				return err
			}
			resp, err := tc.Get(cmd.Context(), &pb.GetRequest{Id: args[0]})
			if err != nil {
				return err
			}
			if asJSON {
				return printProtoJSON(cmd.OutOrStdout(), resp.GetMessage())
			}
			printMessage(cmd.OutOrStdout(), resp.GetMessage())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

func printProtoJSON(w io.Writer, m proto.Message) error {
	out, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, string(out))
	return nil
}

func txStatusWord(s pb.TransactionalStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "TRANSACTIONAL_STATUS_"))
}

func printMessage(w io.Writer, m *pb.TransactionalMessage) {
	fmt.Fprintf(w, "%s  %s\n", m.GetId(), txStatusWord(m.GetStatus()))
	fmt.Fprintf(w, "to %s   from %s   subject %q\n", shown(m.GetTo()), shown(m.GetFromAddress()), m.GetSubject())
	fmt.Fprintf(w, "key %q   message-id <%s>\n", m.GetIdempotencyKey(), m.GetMessageId())
	if m.GetStatus() == pb.TransactionalStatus_TRANSACTIONAL_STATUS_QUEUED && m.GetNextAttemptAt() != nil {
		fmt.Fprintf(w, "next attempt %s\n", m.GetNextAttemptAt().AsTime().Local().Format(time.DateTime))
	}
	if m.GetTemplate() != "" {
		fmt.Fprintf(w, "template %s version %d\n", m.GetTemplate(), m.GetTemplateVersion())
	}
	if r := m.GetReason(); r != "" && m.GetStatus() != pb.TransactionalStatus_TRANSACTIONAL_STATUS_SENT {
		fmt.Fprintf(w, "reason: %s\n", r)
	}
	for _, a := range m.GetAttempts() {
		when := a.GetStartedAt().AsTime().Local().Format(time.DateTime)
		fmt.Fprintf(w, "  #%d  %s  %-10s %s\n", a.GetNumber(), when, a.GetResult(), shown(a.GetReply()))
	}
}

// readData parses --data: a JSON object inline, or @FILE.
func readData(v string) (*structpb.Struct, error) {
	raw := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("--data: %w", err)
		}
		raw = b
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("--data: not a JSON object: %v", err)
	}
	d, err := structpb.NewStruct(m)
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	return d, nil
}

func templateCommand(c *client) *cobra.Command {
	cmd := &cobra.Command{Use: "template", Aliases: []string{"templates"}, Short: "Store, show, list and delete templates for transactional messages"}
	var from, fromName, subject, textFile, htmlFile string
	var putJSON bool
	put := &cobra.Command{
		Use:   "put NAME",
		Short: "Create or replace a template (its version goes up by one)",
		Long: `Store a template for 'rangecast send --template NAME --data JSON'. --subject and the
bodies are Go templates over the data: {{.name}}, {{.code}}. A field the template uses
that a message's data lacks refuses that message instead of sending "<no value>".`,
		Example: `  rangecast send template put password-reset --from no-reply@example.com \
    --subject "Reset your password, {{.name}}" --text reset.txt --html reset.html`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t := &pb.TransactionalTemplate{Name: args[0], FromAddress: from, FromName: fromName, Subject: subject}
			if textFile == "" && htmlFile == "" {
				return fmt.Errorf("give a body: --text FILE, --html FILE, or both")
			}
			if textFile != "" {
				b, err := os.ReadFile(textFile)
				if err != nil {
					return fmt.Errorf("--text: %w", err)
				}
				t.Text = string(b)
			}
			if htmlFile != "" {
				b, err := os.ReadFile(htmlFile)
				if err != nil {
					return fmt.Errorf("--html: %w", err)
				}
				t.Html = string(b)
			}
			tc, err := c.transactional()
			if err != nil {
				return err
			}
			resp, err := tc.PutTemplate(cmd.Context(), &pb.PutTemplateRequest{Template: t})
			if err != nil {
				return err
			}
			if putJSON {
				return jsonLine(cmd.OutOrStdout(), resp.GetTemplate())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s version %d\n", shown(resp.GetTemplate().GetName()), resp.GetTemplate().GetVersion())
			return nil
		},
	}
	f := put.Flags()
	f.StringVar(&from, "from", "", "default From address of messages from this template")
	f.StringVar(&fromName, "from-name", "", "default From display name")
	f.StringVar(&subject, "subject", "", "subject template (required)")
	f.StringVar(&textFile, "text", "", "file with the plain-text body template")
	f.StringVar(&htmlFile, "html", "", "file with the HTML body template")
	put.MarkFlagRequired("subject") //nolint:errcheck
	f.BoolVar(&putJSON, "json", false, "print the stored template (with its version) as JSON")

	var asJSON bool
	show := &cobra.Command{
		Use: "show NAME", Short: "Print a stored template", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tc, err := c.transactional()
			if err != nil {
				return err
			}
			resp, err := tc.GetTemplate(cmd.Context(), &pb.GetTemplateRequest{Name: args[0]})
			if err != nil {
				return err
			}
			t := resp.GetTemplate()
			if asJSON {
				return printProtoJSON(cmd.OutOrStdout(), t)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%s  version %d  updated %s\n", shown(t.GetName()), t.GetVersion(), t.GetUpdatedAt().AsTime().Local().Format(time.DateTime))
			fmt.Fprintf(w, "from %s\nsubject %s\n", shown(strings.TrimSpace(t.GetFromName()+" "+t.GetFromAddress())), shown(t.GetSubject()))
			if t.GetText() != "" {
				fmt.Fprintf(w, "--- text\n%s\n", strings.TrimRight(t.GetText(), "\n"))
			}
			if t.GetHtml() != "" {
				fmt.Fprintf(w, "--- html\n%s\n", strings.TrimRight(t.GetHtml(), "\n"))
			}
			return nil
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(put, show)
	cmd.AddCommand(listTemplatesCommand(c), deleteTemplateCommand(c))
	return cmd
}
