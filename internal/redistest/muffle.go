package redistest

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Muffle is a go-redis hook that drops its client's connections on the
// server's side while the client hears nothing of it: the partition in
// which the server closed the connections (a keepalive timed out, a
// one-way loss) and the client's TCP never learned. After Drop, Redis has
// closed every connection dialed so far (and dropped their pub/sub
// subscriptions); on the client's side their reads wait and their writes
// vanish, until Release, after which they fail as a closed connection's
// do. A read waits no longer than its deadline.
type Muffle struct {
	connsOnly
	mu      sync.Mutex
	conns   []*muffled
	gen     *muffleGen   // the connections dialed since the last Drop share it
	pending []*muffleGen // dropped, not yet released
}

// muffleGen is what one Drop did to the connections dialed before it.
type muffleGen struct {
	dropped  bool
	released chan struct{} // closed by Release
}

type muffled struct {
	net.Conn
	m    *Muffle
	gen  *muffleGen
	done chan struct{} // closed by Close
	once sync.Once

	mu       sync.Mutex
	deadline time.Time // the read deadline, as set
}

// DialHook wraps every connection the client dials.
func (m *Muffle) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return c, err
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.gen == nil {
			m.gen = &muffleGen{released: make(chan struct{})}
		}
		w := &muffled{Conn: c, m: m, gen: m.gen, done: make(chan struct{})}
		m.conns = append(m.conns, w)
		return w, nil
	}
}

// Drop closes every connection dialed so far on the server's side, and
// leaves the client to wait on them.
func (m *Muffle) Drop() {
	m.mu.Lock()
	conns := m.conns
	m.conns = nil
	if m.gen == nil {
		m.gen = &muffleGen{released: make(chan struct{})}
	}
	m.gen.dropped = true
	m.pending = append(m.pending, m.gen)
	m.gen = nil // later dials start a generation of their own
	m.mu.Unlock()
	for _, c := range conns {
		_ = c.Conn.Close()
	}
}

// Release lets the client learn that the dropped connections are closed:
// their reads and writes fail from now on.
func (m *Muffle) Release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range m.pending {
		close(g.released)
	}
	m.pending = nil
}

func (c *muffled) dropped() (bool, <-chan struct{}) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.gen.dropped, c.gen.released
}

// Read reads, or, once the connection was dropped, waits until Release
// (then io.EOF) or the read deadline (then os.ErrDeadlineExceeded).
func (c *muffled) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	dropped, released := c.dropped()
	if err == nil || !dropped {
		return n, err
	}
	c.mu.Lock()
	dl := c.deadline
	c.mu.Unlock()
	var expired <-chan time.Time
	if !dl.IsZero() {
		t := time.NewTimer(time.Until(dl))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-released:
		return 0, io.EOF
	case <-expired:
		return 0, os.ErrDeadlineExceeded
	case <-c.done:
		return 0, net.ErrClosed
	}
}

// Close closes the connection, ending a read that waits.
func (c *muffled) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.Conn.Close()
}

// SyscallConn is the connection underneath's: go-redis checks an idle
// pooled connection's health through it, and finds a dropped one closed.
// (A pub/sub connection is never checked so, and stays muffled.)
func (c *muffled) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// Write writes, or, once the connection was dropped, reports success
// until Release and fails after.
func (c *muffled) Write(b []byte) (int, error) {
	dropped, released := c.dropped()
	if !dropped {
		return c.Conn.Write(b)
	}
	select {
	case <-released:
		return 0, net.ErrClosed
	default:
		return len(b), nil
	}
}

// SetDeadline records the read deadline too. On a dropped connection it
// succeeds, as on one whose end the client has not heard of.
func (c *muffled) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.quiet(c.Conn.SetDeadline(t))
}

// SetReadDeadline records the read deadline.
func (c *muffled) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.quiet(c.Conn.SetReadDeadline(t))
}

// SetWriteDeadline sets the write deadline.
func (c *muffled) SetWriteDeadline(t time.Time) error {
	return c.quiet(c.Conn.SetWriteDeadline(t))
}

// quiet hides err, a failure of the closed connection underneath, while
// the client must not know the connection was dropped.
func (c *muffled) quiet(err error) error {
	if dropped, released := c.dropped(); dropped {
		select {
		case <-released:
		default:
			return nil
		}
	}
	return err
}
