// Package cli is rangecast's command line: the rangecast client commands and
// the coordinator and pageworker server commands. Mains only call in here.
package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rangecast/rangecast/internal/redact"
	"github.com/rangecast/rangecast/internal/server"
	"github.com/rangecast/rangecast/internal/version"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// maxRecv is the largest answer the CLI accepts.
const maxRecv = 256 << 20

// Rangecast is the `rangecast` command.
func Rangecast() *cobra.Command {
	root := &cobra.Command{
		Use:           "rangecast",
		Short:         "Send broadcasts that never reach anyone twice and never skip anyone",
		Version:       version.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// Every subcommand's flags take their (env NAME) values.
		PersistentPreRunE: envHook,
	}
	c := &client{}
	root.PersistentFlags().StringVar(&c.addr, "addr", server.DefaultGRPCAddr, "coordinator gRPC address (env RANGECAST_ADDR)")
	// The token's default is read at dial time, not shown as the flag's
	// default, so --help never prints it.
	root.PersistentFlags().StringVar(&c.token, "token", "", "bearer token for the coordinator's gRPC API (env RANGECAST_TOKEN)")
	root.PersistentFlags().StringVar(&c.ca, "ca", "", "PEM file of the CA that signed the coordinator's TLS certificate: connect over TLS and trust only it (env RANGECAST_CA)")
	root.PersistentFlags().BoolVar(&c.tls, "tls", false, "connect over TLS, trusting the system's CAs (a coordinator with a public certificate) (env RANGECAST_TLS)")
	root.PersistentFlags().StringVar(&c.serverName, "tls-server-name", "", "name the coordinator's certificate must carry, when --addr does not (e.g. through a port-forward to 127.0.0.1) (env RANGECAST_TLS_SERVER_NAME)")
	root.AddCommand(governorCommand(c))
	root.AddCommand(broadcastsCommand(c), contactsCommand(c), mailCommand(), devCommand(), demoCommand())
	root.AddCommand(sendCommand(c))
	root.AddCommand(segmentsCommand(c))
	root.AddCommand(domainsCommand())
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every group below root (contacts,
// broadcasts, …) refuse a word that names none of its commands, as root
// does: cobra otherwise printed the group's help and exited 0, so a
// script's `contacts erase ADDR` (the command is delete) or `broadcasts
// pasue ID` reported success for an erasure or a pause that never
// happened (tester).
func refuseUnknownSubcommands(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		refuseUnknownSubcommands(sub)
		if !sub.HasSubCommands() {
			continue
		}
		if sub.Runnable() {
			// A command that runs itself and has commands too (send, with
			// send status and send template) and takes no word of its own
			// refuses one, but cobra suggests nothing below the root.
			args := sub.Args
			if args == nil {
				args = cobra.NoArgs // what cobra's own check amounts to here
			}
			sub.Args = func(c *cobra.Command, words []string) error {
				err := args(c, words)
				if err != nil && len(words) > 0 && args(c, nil) == nil {
					return unknownSubcommand(c, words[0])
				}
				return err
			}
			continue
		}
		sub.Args = cobra.ArbitraryArgs
		sub.RunE = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			return unknownSubcommand(c, args[0])
		}
	}
}

// unknownSubcommand is the error for a word that is none of c's commands,
// with the near ones.
func unknownSubcommand(c *cobra.Command, word string) error {
	msg := fmt.Sprintf("unknown command %q for %q", word, c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's own default, set only for the root
	}
	if s := c.SuggestionsFor(word); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return fmt.Errorf("%s (run '%s --help' for its commands)", msg, c.CommandPath())
}

// Main runs cmd with a context cancelled by SIGINT/SIGTERM and exits.
func Main(cmd *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.ExecuteContext(ctx); err != nil {
		printError(os.Stderr, err)
		os.Exit(1)
	}
}

// printError writes err for a person: one line per line of it (several
// malformed variables are joined one per line, and shown alone would print
// them as one line with "\n" in it), continuation lines indented, each
// with control characters made visible.
func printError(w io.Writer, err error) {
	for i, line := range strings.Split(redact.String(describe(err)), "\n") {
		prefix := "error:"
		if i > 0 {
			prefix = "      "
		}
		// A tab is layout (cobra's "Did you mean this?\n\tsegments"),
		// not a control character to make visible.
		fmt.Fprintln(w, prefix, shown(strings.ReplaceAll(line, "\t", "    ")))
	}
}

// client dials the coordinator lazily, once a command needs it.
type client struct {
	addr, token string
	// ca, tls and serverName choose TLS (--ca, --tls, --tls-server-name);
	// with none, the connection is plaintext.
	ca         string
	tls        bool
	serverName string
	conn       *grpc.ClientConn
}

// bearer sends "authorization: Bearer <token>" with every call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false: whether the coordinator is reached
// over TLS (its own, --ca/--tls; a TLS-terminating proxy; a service mesh)
// or plaintext on a private network is the operator's choice, and the
// token is sent either way.
func (bearer) RequireTransportSecurity() bool { return false }

func (c *client) dial() (*grpc.ClientConn, error) {
	if c.conn == nil {
		if _, _, err := net.SplitHostPort(c.addr); err != nil {
			return nil, fmt.Errorf("--addr %q: use host:port, e.g. 127.0.0.1:7070", c.addr)
		}
		// The CLI takes whatever the server sends (an import's answer
		// with its capped list of rejected rows, a long history): gRPC's
		// default 4 MiB receive limit is a server-side concern.
		creds, err := c.transportCredentials()
		if err != nil {
			return nil, err
		}
		opts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecv)),
			grpc.WithChainUnaryInterceptor(notTextNamed), grpc.WithChainStreamInterceptor(notTextNamedStream)}
		token := c.token
		if token == "" {
			token = os.Getenv("RANGECAST_TOKEN")
		}
		if token = strings.TrimSpace(token); token != "" {
			// gRPC refuses such a header at the first call with an
			// Internal error that names neither the flag nor the variable.
			if i := strings.IndexFunc(token, func(r rune) bool { return r < 0x21 || r > 0x7e }); i >= 0 {
				return nil, fmt.Errorf("--token (or RANGECAST_TOKEN) has a space, control or non-ASCII character at byte %d; a token is printable ASCII", i)
			}
			opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
		}
		conn, err := grpc.NewClient(c.addr, opts...)
		if err != nil {
			return nil, fmt.Errorf("coordinator address %q: %w", c.addr, err)
		}
		c.conn = conn
	}
	return c.conn, nil
}

// transportCredentials is TLS with --ca's pool or the system's (--tls), or
// plaintext.
func (c *client) transportCredentials() (credentials.TransportCredentials, error) {
	if c.ca == "" && !c.tls {
		if c.serverName != "" {
			return nil, fmt.Errorf("--tls-server-name needs TLS: add --ca FILE or --tls")
		}
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.serverName}
	if c.ca != "" {
		pem, err := os.ReadFile(c.ca)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca %s: no PEM certificate in it (give the CA certificate that signed the coordinator's, e.g. ca.crt of its Secret)", c.ca)
		}
		cfg.RootCAs = pool
	}
	return credentials.NewTLS(cfg), nil
}

func (c *client) broadcasts() (pb.BroadcastServiceClient, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	return pb.NewBroadcastServiceClient(conn), nil
}

func (c *client) audience() (pb.AudienceServiceClient, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	return pb.NewAudienceServiceClient(conn), nil
}

// logger logs to stderr at level (debug, info, warn or error; anything else
// is refused, not taken for info) in format: "text" (logfmt-like key=value) or "json" (one JSON object
// per line, for log collectors).
func logger(level, format string) (*slog.Logger, error) {
	return newLogger(os.Stderr, level, format)
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	l, err := parseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: use text or json", format)
	}
}

// errNotText replaces gRPC's own error for a request with a string that is
// not valid UTF-8 (a file read for a body or a CSV in another encoding):
// "Internal: grpc: error while marshaling: string field contains invalid
// UTF-8" names nothing a person can fix, and is not the server's error.
// Arguments and flags are checked earlier, by name (textArgs).
var errNotText = errors.New("the request holds text that is not valid UTF-8 (a file in another encoding, such as Latin-1 or UTF-16?); convert it to UTF-8, e.g. with iconv -t UTF-8")

func isNotText(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Internal && strings.Contains(st.Message(), "marshal") && strings.Contains(st.Message(), "UTF-8")
}

func notTextNamed(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if isNotText(err) {
		return errNotText
	}
	return err
}

func notTextNamedStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return s, err
	}
	return notTextStream{s}, nil
}

// notTextStream names a message of a client stream (an import's rows) that
// could not be encoded for the same reason.
type notTextStream struct{ grpc.ClientStream }

func (s notTextStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if isNotText(err) {
		return errNotText
	}
	return err
}
