// Package multi holds several locks as one: all of them or none.
//
// A Lock takes its members in one global order, by kind and then by name,
// whatever order they were given in. Two Locks that share members therefore
// never wait for each other in a cycle: no deadlock, however they overlap.
// Each member keeps its own lease, watchdog and fencing token. The Lock is
// lost as soon as any member's hold is lost.
//
//	a, _ := fair.New(client, "invoices")
//	b, _ := fair.New(client, "ledger")
//	both, err := multi.New(a, b)
//	if err != nil { ... }
//	if err := both.Lock(ctx); err != nil { ... } // both, in order, or neither
//	defer both.Unlock(context.Background())
//
// The members may be fair or reentrant locks, on one Redis or on several.
// With several, the order is by name, so give locks on different servers
// different names: New refuses two members of the same kind and name.
//
// A fair member keeps its FIFO queue. A Lock waiting for its second member
// holds its first meanwhile, as ordered locking always does.
//
// [RedLock] is the other way to hold one lock on several servers: one name on
// N independent masters, held while a majority holds it. docs/redlock.md
// says what that quorum does and does not buy.
package multi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/reentrant"
)

// Errors. They are the same values as package fair's and reentrant's.
var (
	// ErrInvalidArgument is wrapped by every error about bad input.
	ErrInvalidArgument = fair.ErrInvalidArgument
	// ErrNotHeld is returned by Unlock when this Lock is not held.
	ErrNotHeld = fair.ErrNotHeld
	// ErrLockLost is the cause of a HoldContext ended because a member's
	// hold was lost, and is returned by Unlock then.
	ErrLockLost = fair.ErrLockLost
	// ErrReleased is the cause of a HoldContext ended by Unlock.
	ErrReleased = fair.ErrReleased
)

// Locker is one member: a *fair.Mutex or a *reentrant.Mutex.
type Locker interface {
	Name() string
	Lock(ctx context.Context) error
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
	Unlock(ctx context.Context) error
	Token() int64
	HoldContext() context.Context
}

var (
	_ Locker = (*fair.Mutex)(nil)
	_ Locker = (*reentrant.Mutex)(nil)
)

// Lock is several locks held as one. Its methods are safe for concurrent
// use, but like a member's handle it is one holder: give each worker its
// own.
type Lock struct {
	members []Locker // in the global order

	mu     sync.Mutex
	hold   *hold       // the current hold, nil if none
	depth  int         // Lock and TryLock calls the current hold is made of
	latest core.Latest // the most recent hold, for Lost and HoldContext
}

// hold is one time every member was held: it ends when the first member's
// hold ends, or by Unlock.
type hold struct {
	core.End
	stops []func() bool // the watchers of the members' holds
}

// New returns a Lock over members, which must be distinct handles on
// distinct locks. It errors, wrapping ErrInvalidArgument, on no members, a
// nil member, or two members of the same kind and name.
func New(members ...Locker) (*Lock, error) {
	if len(members) == 0 {
		return nil, fmt.Errorf("%w: a multi.Lock needs at least one member", ErrInvalidArgument)
	}
	sorted := slices.Clone(members)
	for i, m := range sorted {
		if m == nil || isNilHandle(m) {
			return nil, fmt.Errorf("%w: member %d is nil", ErrInvalidArgument, i)
		}
	}
	slices.SortFunc(sorted, func(a, b Locker) int { return strings.Compare(orderKey(a), orderKey(b)) })
	for i := 1; i < len(sorted); i++ {
		if orderKey(sorted[i]) == orderKey(sorted[i-1]) {
			return nil, fmt.Errorf("%w: two members are the lock %q", ErrInvalidArgument, orderKey(sorted[i]))
		}
	}
	return &Lock{members: sorted}, nil
}

func isNilHandle(m Locker) bool {
	switch v := m.(type) {
	case *fair.Mutex:
		return v == nil
	case *reentrant.Mutex:
		return v == nil
	}
	return false
}

// orderKey is a member's place in the global order: its kind, then its name.
func orderKey(m Locker) string {
	kind := fmt.Sprintf("%T", m)
	return kind + "\x00" + m.Name()
}

// Names returns the members' names in the order they are taken.
func (l *Lock) Names() []string {
	names := make([]string, len(l.members))
	for i, m := range l.members {
		names[i] = m.Name()
	}
	return names
}

// Lock takes every member, in order, each with its watchdog keeping its
// lease. If ctx ends or a member fails, it releases the members it took and
// returns the error: all or nothing. Taken again while held, it re-enters
// every member (see Unlock); after a member's hold was lost it returns
// ErrLockLost until Unlock.
func (l *Lock) Lock(ctx context.Context) error {
	_, err := l.acquire(ctx, func(m Locker) (bool, error) {
		err := m.Lock(ctx)
		return err == nil, err
	})
	return err
}

// TryLock takes every member within wait in all (0: one attempt each, never
// queueing), with a fixed lease when lease > 0, as the members' TryLock
// does. It returns false, having released whatever it took, when a member
// could not be taken in time. A fixed lease counts from each member's own
// acquisition, so the first member's runs out first.
func (l *Lock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 || lease < 0 {
		return false, fmt.Errorf("%w: wait and lease must not be negative, got %v and %v", ErrInvalidArgument, wait, lease)
	}
	deadline := time.Now().Add(wait)
	return l.acquire(ctx, func(m Locker) (bool, error) {
		left := time.Until(deadline)
		if wait == 0 || left < 0 {
			left = 0
		}
		return m.TryLock(ctx, left, lease)
	})
}

func (l *Lock) acquire(ctx context.Context, take func(Locker) (bool, error)) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	l.mu.Lock()
	lost := l.hold != nil && l.hold.IsLost()
	l.mu.Unlock()
	if lost {
		// Re-entering a hold part of which is gone would mix a fresh member
		// hold with re-entered ones: Unlock it first.
		return false, fmt.Errorf("%w: a member's hold was lost; Unlock before taking the Lock again", ErrLockLost)
	}
	for i, m := range l.members {
		ok, err := take(m)
		if err != nil || !ok {
			l.releaseTaken(ctx, i)
			return false, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hold != nil {
		// A re-entry: every member counted it, and so does the Lock.
		l.depth++
		return true, nil
	}
	h := l.watch()
	l.hold, l.depth = h, 1
	l.latest.Set(&h.End)
	return true, nil
}

// releaseTaken unlocks the first n members, in reverse order. When ctx has
// ended, each member's Unlock still runs, bounded by its cleanup timeout.
func (l *Lock) releaseTaken(ctx context.Context, n int) {
	for i := n - 1; i >= 0; i-- {
		_ = l.members[i].Unlock(ctx) // a failure leaves the lease to run out
	}
}

// watch makes the hold that ends when any member's hold ends. It starts no
// goroutine: each member's HoldContext calls back once it is done.
func (l *Lock) watch() *hold {
	h := &hold{}
	for _, m := range l.members {
		mctx := m.HoldContext()
		h.stops = append(h.stops, context.AfterFunc(mctx, func() {
			h.Finish(context.Cause(mctx))
		}))
	}
	return h
}

// Unlock undoes one Lock or successful TryLock: it releases every member
// once, in reverse order, even when ctx has ended (each member's Unlock then
// runs bounded by its cleanup timeout). Like the members, a Lock taken
// again while held (re-entry) must be unlocked as many times; the last
// Unlock ends the hold. It returns ErrNotHeld if the Lock is not held, and
// otherwise the members' errors joined: ErrLockLost among them if a
// member's hold had been lost.
func (l *Lock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	h := l.hold
	if h != nil {
		l.depth--
		if l.depth == 0 {
			l.hold = nil
		}
	}
	last := l.hold == nil
	l.mu.Unlock()
	if h == nil {
		return ErrNotHeld
	}
	if last {
		for _, stop := range h.stops {
			stop()
		}
	}
	var errs []error
	for i := len(l.members) - 1; i >= 0; i-- {
		if err := l.members[i].Unlock(ctx); err != nil {
			errs = append(errs, fmt.Errorf("unlocking %q: %w", l.members[i].Name(), err))
		}
	}
	if last {
		h.Finish(ErrReleased)
	}
	return errors.Join(errs...)
}

// Tokens returns each member's fencing token, in the order of Names; 0 for
// a member not held.
func (l *Lock) Tokens() []int64 {
	tokens := make([]int64, len(l.members))
	for i, m := range l.members {
		tokens[i] = m.Token()
	}
	return tokens
}

// Lost returns a channel closed when any member's hold of the current (or
// most recent) hold is lost. Before the first hold it is never closed.
func (l *Lock) Lost() <-chan struct{} { return l.latest.Lost() }

// HoldContext returns a context cancelled when the current (or most recent)
// hold ends: by Unlock (cause fair.ErrReleased) or by the loss of any
// member's hold (cause ErrLockLost). Before the first hold it is already
// cancelled with cause ErrNotHeld.
func (l *Lock) HoldContext() context.Context { return l.latest.Context() }
