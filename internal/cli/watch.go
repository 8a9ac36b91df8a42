package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/mattn/go-isatty"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

// rate turns successive statuses into messages per second.
type rate struct {
	sent int64
	at   time.Time
	per  float64
}

func (r *rate) update(b *pb.Broadcast, now time.Time) float64 {
	sent := b.GetProgress().GetSent() + b.GetProgress().GetFailed()
	if !r.at.IsZero() && now.After(r.at) {
		r.per = float64(sent-r.sent) / now.Sub(r.at).Seconds()
	}
	r.sent, r.at = sent, now
	return r.per
}

// statusStream yields statuses until the watch ends.
type statusStream interface {
	Recv() (*pb.WatchBroadcastResponse, error)
}

// resumingStream is a watch that outlives its coordinator: when the
// connection is lost (a coordinator restarted in a rollout, a leader
// killed), it opens the watch again, through the same address, for up to
// watchReconnectFor, saying so once on notice. A watch ended at every
// coordinator rollout (tester).
type resumingStream struct {
	ctx    context.Context
	cur    statusStream
	open   func() (statusStream, error)
	notice io.Writer
	// retryEvery is the pause between tries (a second when zero).
	retryEvery time.Duration
}

// watchReconnectFor is how long a watch tries to reach a coordinator again.
const watchReconnectFor = 2 * time.Minute

func (r *resumingStream) Recv() (*pb.WatchBroadcastResponse, error) {
	var lost time.Time
	for {
		var err error
		if r.cur == nil {
			r.cur, err = r.open()
		}
		if err == nil {
			var resp *pb.WatchBroadcastResponse
			if resp, err = r.cur.Recv(); err == nil || errors.Is(err, io.EOF) {
				if !lost.IsZero() {
					fmt.Fprintln(r.notice, "watching again")
				}
				return resp, err
			}
		}
		if status.Code(err) != codes.Unavailable || r.ctx.Err() != nil {
			return nil, err
		}
		r.cur = nil
		if lost.IsZero() {
			lost = time.Now()
			fmt.Fprintf(r.notice, "lost the coordinator (%s); reconnecting for up to %s\n", describe(err), watchReconnectFor)
		} else if time.Since(lost) > watchReconnectFor {
			return nil, err
		}
		select {
		case <-time.After(cmp.Or(r.retryEvery, time.Second)):
		case <-r.ctx.Done():
			return nil, r.ctx.Err()
		}
	}
}

// watchPlain prints one line per status: for logs, pipes and CI.
func watchPlain(out io.Writer, stream statusStream) (*pb.Broadcast, error) {
	var r rate
	var last *pb.Broadcast
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return last, nil
		}
		if err != nil {
			return last, err
		}
		last = resp.GetBroadcast()
		fmt.Fprintf(out, "%s  %.0f msg/s\n", progressLine(last), r.update(last, time.Now()))
	}
}

// watchJSON prints each status as one JSON object per line.
func watchJSON(out io.Writer, stream statusStream) (*pb.Broadcast, error) {
	var last *pb.Broadcast
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return last, nil
		}
		if err != nil {
			return last, err
		}
		last = resp.GetBroadcast()
		line, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(last)
		if err != nil {
			return last, err
		}
		fmt.Fprintln(out, string(line))
	}
}

// endedBadly is the watch's exit status: an error when the broadcast it
// followed to the end failed or was cancelled, so that a script's
// "watch ID && next-step" does not go on as if it had completed (tester).
// Leaving the watch early (q, Ctrl-C) is no error.
func endedBadly(last *pb.Broadcast, err error) error {
	if err = quietCancel(err); err != nil || last == nil {
		return err
	}
	switch last.GetState() {
	case pb.BroadcastState_BROADCAST_STATE_FAILED, pb.BroadcastState_BROADCAST_STATE_CANCELLED:
		return fmt.Errorf("broadcast %s ended %s", last.GetId(), stateWord(last.GetState()))
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

// The live view, a Bubble Tea program fed by the watch stream.
type (
	statusMsg struct {
		b  *pb.Broadcast
		at time.Time
	}
	streamDone struct{ err error }
)

type watchModel struct {
	b     *pb.Broadcast
	rate  rate
	per   float64
	err   error
	width int
}

var (
	titleStyle = lipgloss.NewStyle().Bold(true)
	doneStyle  = lipgloss.NewStyle().Foreground(lipgloss.Color("2"))
	liveStyle  = lipgloss.NewStyle().Foreground(lipgloss.Color("3"))
	dimStyle   = lipgloss.NewStyle().Faint(true)
	warnStyle  = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
)

func (m watchModel) Init() tea.Cmd { return nil }

func (m watchModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		if s := msg.String(); s == "q" || s == "ctrl+c" || s == "esc" {
			return m, tea.Quit
		}
	case tea.WindowSizeMsg:
		m.width = msg.Width
	case statusMsg:
		m.b = msg.b
		m.per = m.rate.update(msg.b, msg.at)
	case streamDone:
		m.err = msg.err
		return m, tea.Quit
	}
	return m, nil
}

func (m watchModel) View() string {
	if m.b == nil {
		return "waiting for the first status…\n"
	}
	return renderWatch(m.b, m.per, m.err) + dimStyle.Render("q quits the view; the broadcast carries on") + "\n"
}

// renderWatch draws a broadcast: a bar per range (its cursor's position),
// the sums, the rate, and what it is waiting for.
func renderWatch(b *pb.Broadcast, per float64, err error) string {
	p := b.GetProgress()
	var s strings.Builder
	fmt.Fprintf(&s, "%s  %s  %s\n", titleStyle.Render(shown(b.GetName())), dimStyle.Render(b.GetId()), stateWord(b.GetState()))
	if b.GetReason() != "" {
		s.WriteString(warnStyle.Render(shown(b.GetReason())) + "\n")
	}
	fmt.Fprintf(&s, "ranges %d/%d done   audience %d (snapshot)   %.0f msg/s\n\n", p.GetRangesDone(), p.GetRangesTotal(), b.GetSnapshotTotal(), per)
	const cols, barWidth = 4, 12
	ranges := p.GetRanges()
	rows := (len(ranges) + cols - 1) / cols
	for row := range rows {
		for col := range cols {
			i := col*rows + row
			if i >= len(ranges) {
				continue
			}
			s.WriteString(rangeBar(ranges[i], barWidth) + "  ")
		}
		s.WriteString("\n")
	}
	fmt.Fprintf(&s, "\nsent %d   failed %d   deferred %d   in flight or in doubt %d   unknown %d   pages %d\n",
		p.GetSent(), p.GetFailed(), p.GetDeferred(), p.GetInDoubt(), p.GetUnknown(), p.GetPagesDispatched())
	if n := p.GetLeftOut(); n > 0 {
		fmt.Fprintf(&s, "left out %d of the audience at start (%s)\n", n, leftOutWhy(b.GetState()))
	}
	if w := p.GetWaitingFor(); w != "" {
		s.WriteString("waiting for: " + liveStyle.Render(w) + "\n")
	}
	if err != nil {
		s.WriteString(warnStyle.Render("watch ended: "+describe(err)) + "\n")
	}
	return s.String()
}

func rangeBar(r *pb.RangeProgress, width int) string {
	filled := int(r.GetPosition() * float64(width))
	if r.GetDone() {
		filled = width
	}
	bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
	label := fmt.Sprintf("%2d ", r.GetIndex())
	switch {
	case r.GetDone():
		bar = doneStyle.Render(bar)
	case filled > 0:
		bar = liveStyle.Render(bar)
	default:
		bar = dimStyle.Render(bar)
	}
	return dimStyle.Render(label) + bar + fmt.Sprintf(" %3.0f%%", 100*min(r.GetPosition(), 1))
}

// watchLive runs the terminal view until the broadcast finishes or the user
// quits.
func watchLive(stream statusStream, out *os.File) (*pb.Broadcast, error) {
	prog := tea.NewProgram(watchModel{}, tea.WithOutput(out))
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				prog.Send(streamDone{err: err})
				return
			}
			prog.Send(statusMsg{b: resp.GetBroadcast(), at: time.Now()})
		}
	}()
	final, err := prog.Run()
	if err != nil {
		return nil, err
	}
	m := final.(watchModel)
	return m.b, m.err
}

// printJSON writes v as indented JSON.
func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
