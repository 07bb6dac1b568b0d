package redistest

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// isScript: a script or function call (EVAL, EVALSHA, FCALL and their
// read-only forms).
func isScript(cmd redis.Cmder) bool {
	name := strings.ToLower(cmd.Name())
	return strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall")
}

// ScriptCounter is a go-redis hook that counts script calls (EVAL, EVALSHA,
// FCALL and their read-only forms) made through a client.
type ScriptCounter struct {
	Scripts atomic.Int64
}

// DialHook passes through.
func (c *ScriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts scripts.
func (c *ScriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			c.Scripts.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts scripts in pipelines.
func (c *ScriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if isScript(cmd) {
				c.Scripts.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// LostReply is a go-redis hook that, once armed, lets the next script run on
// the server and then reports context.DeadlineExceeded to the caller: a reply
// lost after the work was done.
type LostReply struct {
	Armed atomic.Bool
}

// DialHook passes through.
func (l *LostReply) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook loses one script reply when armed.
func (l *LostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if isScript(cmd) && l.Armed.CompareAndSwap(true, false) {
			return context.DeadlineExceeded
		}
		return err
	}
}

// ProcessPipelineHook passes through.
func (l *LostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Partition is a go-redis hook that, while On, fails every command of its
// client without sending it: the process is cut off from Redis. Pub/sub
// messages already on their way may still arrive.
type Partition struct {
	On atomic.Bool
}

// ErrPartitioned is what commands return during a Partition.
var ErrPartitioned = errors.New("redistest: partitioned from Redis")

// DialHook fails dials during the partition.
func (p *Partition) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if p.On.Load() {
			return nil, ErrPartitioned
		}
		return next(ctx, network, addr)
	}
}

// ProcessHook fails commands during the partition.
func (p *Partition) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if p.On.Load() {
			cmd.SetErr(ErrPartitioned)
			return ErrPartitioned
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook fails pipelines during the partition.
func (p *Partition) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if p.On.Load() {
			return ErrPartitioned
		}
		return next(ctx, cmds)
	}
}

// Severable is a go-redis hook that keeps every connection its client
// dials, so that Sever can close them all at once: the connections break
// as a CLIENT KILL or a reset would break them (pub/sub ones included),
// and the client dials anew at its next command. SeverUnread breaks them
// too, but a read the break fails is held until Release: the server has
// dropped the connections while the client's reader has not heard of it,
// as when that reader runs late on a loaded machine.
type Severable struct {
	connsOnly
	mu    sync.Mutex
	conns []net.Conn
	held  chan struct{} // while not nil, failed reads wait for it
}

// DialHook keeps the connection.
func (s *Severable) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			if sc, ok := c.(syscall.Conn); ok {
				c = heldConn{Conn: c, sc: sc, s: s} // go-redis checks idle connections through SyscallConn
			}
		}
		return c, err
	}
}

// heldConn is a connection of a Severable's, whose failed reads wait while
// the Severable holds them (SeverUnread).
type heldConn struct {
	net.Conn
	sc syscall.Conn
	s  *Severable
}

func (c heldConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.s.mu.Lock()
		held := c.s.held
		c.s.mu.Unlock()
		if held != nil {
			<-held
		}
	}
	return n, err
}

func (c heldConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// SeverUnread closes every connection dialed so far, and holds the reads
// that fail for it until Release.
func (s *Severable) SeverUnread() {
	s.mu.Lock()
	if s.held == nil {
		s.held = make(chan struct{})
	}
	s.mu.Unlock()
	s.Sever()
}

// Release lets the reads held since SeverUnread fail.
func (s *Severable) Release() {
	s.mu.Lock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
	s.mu.Unlock()
}

// connsOnly gives a hook that acts on its client's connections alone
// (Severable, Muffle) the pass-through command hooks.
type connsOnly struct{}

// ProcessHook passes through.
func (connsOnly) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook passes through.
func (connsOnly) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Sever closes every connection dialed so far.
func (s *Severable) Sever() {
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}
