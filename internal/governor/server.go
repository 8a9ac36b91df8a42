package governor

import (
	"math"
	"sync"
	"time"
)

// Server is the hourly limit of one SMTP server. Every sending domain that
// sends through the server shares it: the relay counts all of them. A
// Domain made alone has a private one (its state keeps the window); a
// coordinator shares one among its domains with ShareServer.
type Server struct {
	mu       sync.Mutex
	name     string
	limit    int // 0: none
	w        HourlyWindow
	inFlight int
}

// NewServer returns the hourly limit limit (0: none) of the server named
// name, with its stored window w.
func NewServer(name string, limit int, w HourlyWindow) *Server {
	return &Server{name: name, limit: max(limit, 0), w: w.clone()}
}

// Name is the server's configured name.
func (s *Server) Name() string { return s.name }

// SetLimit changes the hourly limit (0: none).
func (s *Server) SetLimit(n int) {
	s.mu.Lock()
	s.limit = max(n, 0)
	s.mu.Unlock()
}

// Window is a copy of the window, to persist.
func (s *Server) Window() HourlyWindow {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.clone()
}

// Adopt replaces the window (a merge after a handover).
func (s *Server) Adopt(w HourlyWindow) {
	s.mu.Lock()
	s.w = w.clone()
	s.mu.Unlock()
}

// Reset starts counting from at; sends before stay recorded.
func (s *Server) Reset(at time.Time) {
	s.mu.Lock()
	s.w.Reset(at)
	s.mu.Unlock()
}

// left is how many more the limit allows now, grants in flight included.
func (s *Server) left(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limit == 0 {
		return math.MaxInt
	}
	return max(0, s.limit-s.w.Count(now)-s.inFlight)
}

func (s *Server) reserve(n int) {
	s.mu.Lock()
	s.inFlight += n
	s.mu.Unlock()
}

func (s *Server) release(n int) {
	s.mu.Lock()
	s.inFlight = max(0, s.inFlight-n)
	s.mu.Unlock()
}

func (s *Server) record(now time.Time, n int) {
	s.mu.Lock()
	s.w.Record(now, n)
	s.mu.Unlock()
}

// binds reports the limit and when it frees up, for a refusal's reason;
// limit 0 when there is none.
func (s *Server) binds(now time.Time) (limit int, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limit == 0 {
		return 0, time.Time{}
	}
	return s.limit, s.w.freeAt(now, s.limit, s.inFlight)
}

// ServerStatus is a server's hourly window as shown.
type ServerStatus struct {
	Name          string
	EmailsPerHour int
	Count, Sent   int
	ResetAt       time.Time
}

// Status reports the window at now.
func (s *Server) Status(now time.Time) ServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ServerStatus{Name: s.name, EmailsPerHour: s.limit, Count: s.w.Count(now), Sent: s.w.Sent(now), ResetAt: s.w.ResetAt}
}
