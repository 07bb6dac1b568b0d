package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// lockError names the primitive and the lock an error came from: what a
// log line needs when one process holds many locks.
type lockError struct {
	what, name string
	err        error
}

func (e *lockError) Error() string {
	return fmt.Sprintf("fairlock: %s %q: %s", e.what, e.name, strings.TrimPrefix(e.err.Error(), "fairlock: "))
}

func (e *lockError) Unwrap() error { return e.err }

// Named wraps err, if not nil, with the primitive (what: "fair lock") and
// the lock's name; errors.Is and errors.As see through it. ctx's own error
// too: errors.Is(err, context.DeadlineExceeded) holds, err == ctx.Err()
// does not.
func Named(ctx context.Context, what, name string, err error) error {
	if err == nil {
		return err
	}
	var le *lockError
	if errors.As(err, &le) && le.name == name {
		return err
	}
	if isLayoutRefusal(err) {
		err = layoutError{err}
	}
	return &lockError{what: what, name: name, err: err}
}

// layoutError is Redis's refusal of a lock whose keys hold data of another
// layout, or not fairlock's (hold.lua's layout_error), matched by
// ErrDataLayout too. Its text is the refusal's, after the step that met it
// ("joining the queue: lock ... has data layout 7, ..."): the lock's error
// says "fairlock:" once, in front.
type layoutError struct{ err error }

func (e layoutError) Error() string   { return strings.Replace(e.err.Error(), ": fairlock: ", ": ", 1) }
func (e layoutError) Unwrap() []error { return []error{ErrDataLayout, e.err} }

// isLayoutRefusal reports whether err is hold.lua's layout_error: an error
// reply whose text starts as that function's two texts do.
func isLayoutRefusal(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	text := rerr.Error()
	return strings.HasPrefix(text, "fairlock: ") &&
		(strings.Contains(text, " has data layout ") || strings.Contains(text, " that fairlock did not write "))
}

// NoAnswer wraps err, ctx's error when a call to Redis sent at sent had no
// answer at at, with what is known: "no answer from Redis to a call sent
// 300ms earlier: context deadline exceeded". A call with no answer says
// nothing of whether Redis can be reached.
func NoAnswer(sent, at time.Time, err error) error {
	return fmt.Errorf("no answer from Redis to a call sent %v earlier: %w", at.Sub(sent).Round(time.Millisecond), err)
}

// Step wraps err, if not nil, with what the caller was doing: "joining the
// queue".
func Step(step string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", step, err)
}
