package transport

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Abandoned is the error of a script call whose ctx ended before Redis
// answered, on a client that does not end its calls at their ctx's end:
// the call goes on in the background, and Done is closed when it has
// returned. What the call may have done (a grant) is the caller's to undo,
// after Done (AfterAbandoned). It wraps ctx's error.
type Abandoned struct {
	Cause error
	Done  <-chan struct{}
}

func (a *Abandoned) Error() string { return a.Cause.Error() }
func (a *Abandoned) Unwrap() error { return a.Cause }

// AfterAbandoned returns once the call whose error is err has returned, if
// err says it was abandoned (Abandoned), or when ctx ends: an undo of what
// the call may have done then comes after it, not before.
func AfterAbandoned(ctx context.Context, err error) {
	a, ok := err.(*Abandoned)
	if !ok {
		return
	}
	select {
	case <-a.Done:
	case <-ctx.Done():
	}
}

// boundsCalls reports whether c ends its calls when their ctx ends
// (go-redis's ContextTimeoutEnabled).
func boundsCalls(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// selfBound is the longest a call on c may take before go-redis gives up
// by itself (its timeouts, tries and backoffs, and the wait for a pooled
// connection), with a margin; 0 if it has none this package can read (a
// timeout turned off, a client of another type).
func selfBound(c redis.UniversalClient) time.Duration {
	var dial, read, write, pool, backoff time.Duration
	var retries int
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		dial, read, write, pool, backoff, retries = o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetryBackoff, o.MaxRetries
	case *redis.ClusterClient:
		o := c.Options()
		dial, read, write, pool, backoff, retries = o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetryBackoff, o.MaxRetries+o.MaxRedirects
	default:
		return 0
	}
	if dial <= 0 || read <= 0 || write <= 0 || pool <= 0 {
		return 0 // no timeout: a call may wait for ever
	}
	tries := time.Duration(max(retries, 0) + 1)
	return 2 * (tries*(pool+dial+write+read) + (tries-1)*max(backoff, 0))
}

// needsBound reports whether a call on c with ctx must be bounded here: ctx
// has a deadline that go-redis would not keep by itself.
func needsBound(ctx context.Context, c redis.UniversalClient) bool {
	d, ok := ctx.Deadline()
	if !ok || boundsCalls(c) || ctx.Value(detachedKey{}) != nil {
		return false
	}
	limit := selfBound(c)
	return limit == 0 || time.Until(d) < limit
}

// EndsInTime reports whether go-redis ends a call on c, made now, by
// itself before ctx's deadline, if ctx has one: its own bound of a call
// (selfBound) is finite, and ctx has no deadline or a farther one. Such a
// call, made on a context that does not carry ctx's cancellation, still
// returns in time for ctx's deadline; a cancellation of ctx is seen when
// it returns.
func EndsInTime(ctx context.Context, c redis.UniversalClient) bool {
	limit := selfBound(c)
	if limit == 0 {
		return false
	}
	d, ok := ctx.Deadline()
	return !ok || time.Until(d) >= limit
}

type detachedKey struct{}

// Detached marks ctx as that of a call whose caller does not wait for it
// (a clean-up that goes on in the background, core.Bounded): its calls are
// not bounded here again, only by ctx's deadline as go-redis keeps it.
func Detached(ctx context.Context) context.Context {
	return context.WithValue(ctx, detachedKey{}, true)
}

// bounded runs call on a goroutine and returns what it returns, or, when
// ctx ends first, what abandoned makes of the Abandoned error.
func bounded[T any](ctx context.Context, call func() T, abandoned func(*Abandoned) T) T {
	res := make(chan T, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		res <- call()
	}()
	select {
	case r := <-res:
		return r
	case <-ctx.Done():
		return abandoned(&Abandoned{Cause: ctx.Err(), Done: done})
	}
}

// failedCmd is a command that failed with err.
func failedCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
