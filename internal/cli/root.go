// Package cli is rangecast's command line: the rangecast client commands and
// the coordinator and pageworker server commands. Mains only call in here.
package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rangecast/rangecast/internal/server"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// env returns the environment variable's value, or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// Rangecast is the `rangecast` command.
func Rangecast() *cobra.Command {
	root := &cobra.Command{
		Use:           "rangecast",
		Short:         "Send broadcasts that never reach anyone twice and never skip anyone",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	c := &client{}
	root.PersistentFlags().StringVar(&c.addr, "addr", env("RANGECAST_ADDR", server.DefaultGRPCAddr), "coordinator gRPC address (env RANGECAST_ADDR)")
	root.AddCommand(broadcastsCommand(c), contactsCommand(c), mailCommand(), devCommand(), demoCommand())
	return root
}

// Main runs cmd with a context cancelled by SIGINT/SIGTERM and exits.
func Main(cmd *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", describe(err))
		os.Exit(1)
	}
}

// client dials the coordinator lazily, once a command needs it.
type client struct {
	addr string
	conn *grpc.ClientConn
}

func (c *client) dial() (*grpc.ClientConn, error) {
	if c.conn == nil {
		if _, _, err := net.SplitHostPort(c.addr); err != nil {
			return nil, fmt.Errorf("--addr %q: use host:port, e.g. 127.0.0.1:7070", c.addr)
		}
		conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("coordinator address %q: %w", c.addr, err)
		}
		c.conn = conn
	}
	return c.conn, nil
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

func logger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}
