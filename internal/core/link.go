package core

import (
	"context"
	"fmt"

	"github.com/fairlock/fairlock/internal/transport"
)

// The public face. Package fairlock declares what users hold and compare
// with, the Owner type and the errors; it imports this package, which so
// cannot import it. Its init hands them down (Link) before any handle can
// be made: every constructor takes a *fairlock.Owner.

// Public is what package fairlock hands down.
type Public struct {
	InvalidArgument, NotHeld, LockLost, Released, Pending, Closed, NotReplicated, DataLayout error

	OwnerOf func(any) *Owner // the core of a *fairlock.Owner; nil for nil
	Wrap    func(*Owner) any // a *fairlock.Owner of a core (tests' rigs)
}

// The errors of package fairlock, set by Link.
var (
	ErrInvalidArgument, ErrNotHeld, ErrLockLost, ErrReleased error
	ErrPending, ErrClosed, ErrNotReplicated, ErrDataLayout   error
)

var public Public

// Link takes package fairlock's errors and owner type, and gives the
// errors to the internal packages below this one.
func Link(p Public) {
	public = p
	ErrInvalidArgument, ErrNotHeld, ErrLockLost, ErrReleased = p.InvalidArgument, p.NotHeld, p.LockLost, p.Released
	ErrPending, ErrClosed, ErrNotReplicated, ErrDataLayout = p.Pending, p.Closed, p.NotReplicated, p.DataLayout
	transport.ErrClosed = p.Closed
	// What is made of them once.
	errUnmade = Invalid("a zero or nil handle: make it with its constructor (fair.New, reentrant.New, ...)")
	errDraining = fmt.Errorf("%w: the owner is draining (Owner.Drain): no new acquisitions", ErrClosed)
	errBornLost = fmt.Errorf("%w: granted, but its lease, less the safety margin for clock drift (1%% and 2 ms), ran out before Redis's answer arrived (a longer lease, or a faster link to Redis)", ErrLockLost)
	errGivenBack = fmt.Errorf("%w: granted while the owner's presence connection was down, "+
		"and taken over before it came back; given back", ErrLockLost)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrNotHeld)
	notHeldCtx = ctx
}

// OwnerOf returns the core of owner, a *fairlock.Owner; nil if it is nil.
func OwnerOf(owner any) *Owner { return public.OwnerOf(owner) }

// PublicOwner returns a *fairlock.Owner (as any) on o: what the tests'
// rigs, which make owners with NewOwnerWith, hand to constructors.
func PublicOwner(o *Owner) any { return public.Wrap(o) }
