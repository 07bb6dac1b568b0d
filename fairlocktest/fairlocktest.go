// Package fairlocktest runs an embedded Redis for the tests of code that
// uses fairlock: no server to install, one per test, and a clock the test
// moves. docs/testing.md shows how to use it.
//
// The server is miniredis (github.com/alicebob/miniredis/v2), which runs
// fairlock's scripts. Its clock stands still from Start on: only Advance
// moves it, and with it the time every script reads (Redis's TIME) and every
// key's TTL. So a lease or a waiter's wait timeout runs out in Redis exactly
// when the test says. The library's own timers (the watchdog's renewals, a
// hold's local deadline) run on real time: a test that lets a hold be lost
// gives the handle a short lease (WithLease), moves the server's clock past
// it, and waits for Lost, which closes at the watchdog's next renewal.
package fairlocktest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/redis/go-redis/v9"
)

// Server is an embedded Redis, a client of it and an owner of handles on
// that client.
type Server struct {
	// Client is a client of the server.
	Client *redis.Client
	// Owner is an owner of handles on Client, for the handles under test
	// (fair.New(s.Owner, name)). Close closes it before the client.
	Owner *fairlock.Owner
	mr    *miniredis.Miniredis

	mu  sync.Mutex
	now time.Time
}

// Start starts a server for tb, closed with its client when tb ends. Its
// clock stands at the current time until Advance moves it.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := New()
	if err != nil {
		tb.Fatalf("fairlocktest: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// New starts a server outside a test (an Example, a benchmark's setup);
// Close it when done. Its clock stands at the current time until Advance
// moves it.
func New() (*Server, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return nil, fmt.Errorf("starting miniredis: %w", err)
	}
	now := time.Now().Truncate(time.Millisecond)
	mr.SetTime(now)
	mr.ClockTTL(true) // TTLs run out as the clock moves
	// A server long in use, not one that just lost its data: its first
	// acquisitions need not wait for the pause (docs/presence.md), which
	// its standing clock would never reach.
	_ = mr.Set(core.BootKey, "0")
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	owner, err := fairlock.NewOwner(client)
	if err != nil {
		mr.Close()
		return nil, err
	}
	return &Server{Client: client, Owner: owner, mr: mr, now: now}, nil
}

// Advance moves the server's clock by d: scripts read the new time, and
// keys whose TTL ran out in between are gone. A negative d moves it back,
// as a server restarted on a machine whose clock is behind would be: a test
// of what fairlock assumes never happens (its tokens rise with the clock).
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d)
	s.mr.SetTime(s.now)
}

// Now is the server's clock.
func (s *Server) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// Addr is the server's address, for clients of other processes' kind (a
// second client stands for a second machine).
func (s *Server) Addr() string { return s.mr.Addr() }

// Miniredis is the server itself, for what this package does not cover.
func (s *Server) Miniredis() *miniredis.Miniredis { return s.mr }

// Close closes the owner (releasing what its handles hold, ending their
// waits) and the client, and stops the server.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = s.Owner.Close(ctx)
	cancel()
	_ = s.Client.Close()
	s.mr.Close()
}
