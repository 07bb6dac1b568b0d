// Package multi holds several locks as one: all of them or none.
//
// A Lock takes its members in one global order, by kind and then by name,
// whatever order they were given in. Two Locks that share members therefore
// never wait for each other in a cycle: no deadlock, however they overlap.
// Each member keeps its own lease, watchdog and fencing token. The Lock is
// lost as soon as any member's hold is lost.
//
//	owner, _ := fairlock.NewOwner(client) // one per client, for the process
//	a, _ := fair.New(owner, "invoices")
//	b, _ := fair.New(owner, "ledger")
//	both, err := multi.New(a, b) // safe to share, as its members are
//	if err != nil { ... }
//	hctx, err := both.LockContext(ctx) // both, in order, or neither
//	if err != nil { ... }
//	defer both.Unlock(hctx) // hctx carries the hold: Lock given it re-enters
//
// The members may be fair or reentrant locks, or fair read-write locks
// (taken as their write lock), on one Redis or on several.
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

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/reentrant"
)

// Locker is one member: a *fair.Mutex, a *reentrant.Mutex, or a
// *fair.RWMutex, whose write lock the Lock takes.
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
	_ Locker = (*fair.RWMutex)(nil)
)

// Lock is several locks held as one. Its methods are safe for concurrent
// use, and goroutines sharing it exclude each other, as its members'
// handles do: each Lock takes its own turn at every member. A call
// re-enters the hold only when its ctx carries it (LockContext, Do,
// HoldContext, or a context derived from one).
type Lock struct {
	members []Locker // in the global order

	mu     sync.Mutex
	hold   *hold       // the current hold, nil if none
	latest core.Latest // the most recent hold, for Lost and HoldContext
}

// hold is one time every member was held: it ends when the first member's
// hold ends, or by Unlock.
type hold struct {
	core.End
	l      *Lock
	depth  int               // Lock and TryLock calls it is made of (under l.mu)
	proofs []context.Context // each member's hold context: what re-enters it
	stops  []func() bool     // the watchers of the members' holds
}

// key marks a context that carries a hold of the Lock l.
type key struct{ l *Lock }

// carrying is a context that also carries what the members' hold contexts
// carry: each member's proof that the call chain holds it.
type carrying struct {
	context.Context
	proofs []context.Context
}

func (c carrying) Value(k any) any {
	for _, p := range c.proofs {
		if v := p.Value(k); v != nil {
			return v
		}
	}
	return c.Context.Value(k)
}

// New returns a Lock over members, which must be distinct handles on
// distinct locks. It errors, wrapping fairlock.ErrInvalidArgument, on no
// members, a nil or zero member, or two members of the same kind and name.
func New(members ...Locker) (*Lock, error) {
	if len(members) == 0 {
		return nil, fmt.Errorf("%w: a multi.Lock needs at least one member", fairlock.ErrInvalidArgument)
	}
	sorted := slices.Clone(members)
	for i, m := range sorted {
		if m == nil || isNilHandle(m) {
			return nil, fmt.Errorf("%w: member %d is nil", fairlock.ErrInvalidArgument, i)
		}
		if kindOf(m) == "" {
			return nil, fmt.Errorf("%w: member %d is a %T; members are *fair.Mutex, *reentrant.Mutex or *fair.RWMutex", fairlock.ErrInvalidArgument, i, m)
		}
		if m.Name() == "" { // every handle a constructor made has a name
			return nil, fmt.Errorf("%w: member %d is a zero %T: make it with its constructor", fairlock.ErrInvalidArgument, i, m)
		}
	}
	slices.SortFunc(sorted, func(a, b Locker) int { return strings.Compare(orderKey(a), orderKey(b)) })
	for i := 1; i < len(sorted); i++ {
		if orderKey(sorted[i]) == orderKey(sorted[i-1]) {
			return nil, fmt.Errorf("%w: two members are the %s %q", fairlock.ErrInvalidArgument, kindOf(sorted[i]), sorted[i].Name())
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
	case *fair.RWMutex:
		return v == nil
	}
	return false
}

// kindOf names a member's kind, as errors say it; "" for a type that is
// not a member kind.
func kindOf(m Locker) string {
	switch m.(type) {
	case *fair.Mutex:
		return "fair lock"
	case *reentrant.Mutex:
		return "reentrant lock"
	case *fair.RWMutex:
		return "read-write lock"
	}
	return ""
}

// orderKey is a member's place in the global order: its kind, then its name.
func orderKey(m Locker) string { return kindOf(m) + "\x00" + m.Name() }

// Names returns the members' names in the order they are taken.
func (l *Lock) Names() []string {
	if !l.made() {
		return nil
	}
	names := make([]string, len(l.members))
	for i, m := range l.members {
		names[i] = m.Name()
	}
	return names
}

// Lock takes every member, in order, each with its watchdog keeping its
// lease. If ctx ends or a member fails, it releases the members it took and
// returns the error: all or nothing. Those releases are Unlocks on ctx: once
// ctx has ended (the usual way a member fails, waiting on a server that
// hangs), they wait only for what is left of its 50 ms grace, which the
// failed member's own clean-up may have used, and go on in the background,
// within each member's cleanup timeout; so a member taken may be held for a
// moment after Lock returned, and its owner's Close waits for it. Given a
// ctx that carries this Lock's hold, it re-enters every member (see
// Unlock); that hold lost, it returns fairlock.ErrLockLost.
func (l *Lock) Lock(ctx context.Context) error {
	if !l.made() {
		return core.Unmade()
	}
	_, err := l.acquire(ctx, lockMember)
	return err
}

// lockMember takes one member as Lock does: until held or ctx ends.
func lockMember(ctx context.Context, m Locker) (bool, error) {
	err := m.Lock(ctx)
	return err == nil, err
}

// LockContext is Lock, and returns the context to do the work in: ctx's
// values and deadline, cancelled also when the hold ends (a member's loss,
// or the last Unlock), and carrying the hold, so that Lock given it
// re-enters and Unlock given it releases exactly this hold. As for every
// primitive, ctx's end ends that context, never the hold: Unlock it.
func (l *Lock) LockContext(ctx context.Context) (context.Context, error) {
	if !l.made() {
		return nil, core.Unmade()
	}
	h, err := l.acquire(ctx, lockMember)
	if err != nil {
		return nil, err
	}
	return context.WithValue(core.Bind(ctx, &h.End), key{l}, h), nil
}

// Do runs fn holding every member, as fair.Mutex.Do does: fn's context is
// cancelled when a member's hold is lost or ctx ends, and the members are
// released when fn returns, on a context of its own bounded by 5 s. It
// returns fn's error, joined with the release's if that failed.
func (l *Lock) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	if !l.made() {
		return core.Unmade()
	}
	if err := core.CheckFunc(fn); err != nil {
		return err
	}
	hctx, err := l.LockContext(ctx)
	if err != nil {
		return err
	}
	return core.Held(hctx, l.Unlock, core.DefaultCleanupTimeout, fn)
}

// TryLock takes every member within wait in all (0: one attempt each, never
// queueing), with a fixed lease when lease > 0, as the members' TryLock
// does. It returns false, nil, having released whatever it took (as Lock
// releases it), when a member could not be taken in time. A fixed lease counts from each member's own
// acquisition, so the first member's runs out first.
func (l *Lock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if !l.made() {
		return false, core.Unmade()
	}
	if wait < 0 || lease < 0 {
		return false, fmt.Errorf("%w: wait and lease must not be negative, got %v and %v", fairlock.ErrInvalidArgument, wait, lease)
	}
	deadline := time.Now().Add(wait)
	h, err := l.acquire(ctx, func(ctx context.Context, m Locker) (bool, error) {
		left := time.Until(deadline)
		if wait == 0 || left < 0 {
			left = 0
		}
		return m.TryLock(ctx, left, lease)
	})
	return h != nil, err
}

// carried returns the hold of this Lock that ctx carries, nil if none.
func (l *Lock) carried(ctx context.Context) *hold {
	h, _ := ctx.Value(key{l}).(*hold)
	return h
}

func (l *Lock) acquire(ctx context.Context, take func(context.Context, Locker) (bool, error)) (*hold, error) {
	if err := core.CheckContext(ctx); err != nil {
		return nil, err
	}
	h := l.carried(ctx)
	if h == nil || !h.IsEnded() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	if h != nil {
		return l.reenter(ctx, h, take)
	}
	var proofs []context.Context
	for i, m := range l.members {
		ok, err := take(ctx, m)
		if err != nil || !ok {
			l.releaseTaken(ctx, proofs, i)
			return nil, err
		}
		proofs = append(proofs, m.HoldContext()) // this call's: the member excludes others
	}
	h = l.watch(proofs)
	l.mu.Lock()
	old := l.hold
	l.hold = h
	l.mu.Unlock()
	if old != nil {
		// Only a hold that ended by a member's loss can be left behind.
		old.Finish(fairlock.ErrLockLost)
	}
	l.latest.Set(&h.End)
	return h, nil
}

// reenter takes every member again for a call chain that holds h.
func (l *Lock) reenter(ctx context.Context, h *hold, take func(context.Context, Locker) (bool, error)) (*hold, error) {
	if h.IsLost() {
		// Re-entering a hold part of which is gone would mix a fresh member
		// hold with re-entered ones: Unlock it first.
		return nil, fmt.Errorf("%w: a member's hold was lost; Unlock before taking the Lock again", fairlock.ErrLockLost)
	}
	if h.IsEnded() {
		return nil, fairlock.ErrNotHeld
	}
	mctx := carrying{ctx, h.proofs}
	for i, m := range l.members {
		ok, err := take(mctx, m)
		if err != nil || !ok {
			l.releaseTaken(ctx, h.proofs, i)
			return nil, err
		}
	}
	l.mu.Lock()
	h.depth++
	l.mu.Unlock()
	return h, nil
}

// releaseTaken unlocks the first n members, in reverse order, each the hold
// its proof carries. When ctx has ended, each member's Unlock still runs,
// within its grace.
func (l *Lock) releaseTaken(ctx context.Context, proofs []context.Context, n int) {
	for i := n - 1; i >= 0; i-- {
		_ = l.members[i].Unlock(carrying{ctx, proofs[i : i+1]}) // a failure leaves the lease to run out
	}
}

// watch makes the hold that ends when any member's hold ends. It starts no
// goroutine: each member's hold context calls back once it is done.
func (l *Lock) watch(proofs []context.Context) *hold {
	h := &hold{l: l, depth: 1, proofs: proofs}
	for _, mctx := range proofs {
		h.stops = append(h.stops, context.AfterFunc(mctx, func() {
			h.Finish(context.Cause(mctx))
		}))
	}
	return h
}

// Unlock undoes one Lock or successful TryLock of the hold its ctx carries,
// or, with any other ctx, of the current hold: it releases every member
// once, in reverse order, even when ctx has ended. Like the members, a Lock
// re-entered must be unlocked as many times; the last Unlock ends the
// hold. It returns fairlock.ErrNotHeld if the Lock is not held, and otherwise the
// members' errors joined: fairlock.ErrLockLost among them if a member's hold had
// been lost.
func (l *Lock) Unlock(ctx context.Context) error {
	if !l.made() {
		return core.Unmade()
	}
	if err := core.CheckContext(ctx); err != nil {
		return err
	}
	h := l.carried(ctx)
	l.mu.Lock()
	if h == nil {
		h = l.hold
	}
	if h == nil || h.depth == 0 {
		l.mu.Unlock()
		return fairlock.ErrNotHeld
	}
	h.depth--
	last := h.depth == 0
	if last && l.hold == h {
		l.hold = nil
	}
	l.mu.Unlock()
	if last {
		for _, stop := range h.stops {
			stop()
		}
	}
	var errs []error
	for i := len(l.members) - 1; i >= 0; i-- {
		if err := l.members[i].Unlock(carrying{ctx, h.proofs[i : i+1]}); err != nil {
			errs = append(errs, fmt.Errorf("unlocking %q: %w", l.members[i].Name(), err))
		}
	}
	if last {
		h.Finish(fairlock.ErrReleased)
	}
	return errors.Join(errs...)
}

// Tokens returns each member's fencing token, in the order of Names; 0 for
// a member not held.
func (l *Lock) Tokens() []int64 {
	if !l.made() {
		return nil
	}
	tokens := make([]int64, len(l.members))
	for i, m := range l.members {
		tokens[i] = m.Token()
	}
	return tokens
}

// Lost returns a channel closed when any member's hold of the current (or
// most recent) hold is lost. Before the first hold it is never closed.
func (l *Lock) Lost() <-chan struct{} {
	if !l.made() {
		lost, _ := core.Unheld()
		return lost
	}
	return l.latest.Lost()
}

// HoldContext returns a context cancelled when the current (or most recent)
// hold ends: by Unlock (cause fairlock.ErrReleased) or by the loss of any
// member's hold (cause fairlock.ErrLockLost). It carries that hold, as LockContext's
// does: call it only from the call chain that holds the Lock. Before the
// first hold it is already cancelled with cause fairlock.ErrNotHeld.
func (l *Lock) HoldContext() context.Context {
	if !l.made() {
		_, ctx := core.Unheld()
		return ctx
	}
	l.mu.Lock()
	h := l.hold
	l.mu.Unlock()
	if h == nil {
		return l.latest.Context()
	}
	return context.WithValue(h.Context(), key{l}, h)
}

// made reports whether l was made by New: not nil, not a zero value. Its
// methods with an error refuse otherwise (core.Unmade), and the others
// return zero values.
func (l *Lock) made() bool { return l != nil && len(l.members) > 0 }
