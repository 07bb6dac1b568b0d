package core

import (
	"context"
	"time"
)

// The calls of a mutex handle of either kind (fair.Mutex, reentrant.Mutex)
// that are more than their core's method: each kind's handle forwards to
// these, and its own doc comment says what the call means for that kind.

// Lock waits until the lock is this call's (its turn waited out by its
// place's Wait).
func (m *Mutex) Lock(ctx context.Context) error {
	_, err := m.lock(ctx, LockAttempt(m.Config()))
	return err
}

// LockContext is Lock, returning the context to do the work in (Bind).
func (m *Mutex) LockContext(ctx context.Context) (context.Context, error) {
	e, err := m.lock(ctx, LockAttempt(m.Config()))
	if err != nil {
		return nil, err
	}
	return Bind(ctx, e), nil
}

// Do runs fn holding the lock, with the context LockContext returns, then
// releases it (Held).
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	if err := CheckFunc(fn); err != nil {
		return err
	}
	hctx, err := m.LockContext(ctx)
	if err != nil {
		return err
	}
	return Held(hctx, m.Unlock, m.Config().CleanupTimeout, fn)
}

// TryLock is Lock for up to wait, with a fixed lease if lease > 0.
func (m *Mutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	a, err := TryAttempt(m.Config(), wait, lease)
	if err != nil {
		return false, m.Wrap(ctx, err)
	}
	e, err := m.lock(ctx, a)
	return e != nil, err
}

// lock is an acquisition of a, its turn waited out by its place's Wait.
func (m *Mutex) lock(ctx context.Context, a Attempt) (*End, error) {
	if !m.made() {
		return nil, errUnmade // as Begin would say
	}
	return m.Acquire(ctx, a, m.agent.Wait)
}
