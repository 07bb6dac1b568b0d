package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/multi"
	"github.com/fairlock/fairlock/reentrant"
)

// Every zero or nil value of every exported type with methods, used as a
// newcomer might (a struct field never set, a handle declared but not
// made): each method with an error returns one wrapping ErrInvalidArgument,
// and the others return zero values, a context already done, or a channel;
// none panics.
func TestZeroValuesDoNotPanic(t *testing.T) {
	values := []any{
		&fair.Mutex{}, (*fair.Mutex)(nil),
		&fair.Semaphore{}, (*fair.Semaphore)(nil),
		&fair.Permit{}, (*fair.Permit)(nil),
		&fair.RWMutex{}, (*fair.RWMutex)(nil),
		&reentrant.Mutex{}, (*reentrant.Mutex)(nil),
		&multi.Lock{}, (*multi.Lock)(nil),
		&multi.RedLock{}, (*multi.RedLock)(nil),
		&fairlock.Owner{}, (*fairlock.Owner)(nil),
	}
	for _, v := range values {
		rv := reflect.ValueOf(v)
		for i := range rv.NumMethod() {
			method := rv.Type().Method(i)
			name := fmt.Sprintf("zero %T.%s", v, method.Name)
			if rv.IsNil() {
				name = fmt.Sprintf("nil %T.%s", v, method.Name)
			}
			t.Run(name, func(t *testing.T) {
				fn := rv.Method(i)
				args := make([]reflect.Value, fn.Type().NumIn())
				for j := range args {
					args[j] = argument(fn.Type().In(j))
				}
				var out []reflect.Value
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("panicked: %v", r)
						}
					}()
					out = fn.Call(args)
				}()
				if n := len(out); n > 0 && out[n-1].Type() == errType {
					// A call with an error: the error says why, and the
					// other results are zero (a nil context included).
					err, _ := out[n-1].Interface().(error)
					if !errors.Is(err, fairlock.ErrInvalidArgument) {
						t.Errorf("error %v, want one wrapping ErrInvalidArgument", err)
					}
					for _, o := range out[:n-1] {
						if !o.IsZero() {
							t.Errorf("result %v beside the error, want the zero value", o)
						}
					}
					return
				}
				for _, o := range out {
					checkResult(t, o)
				}
			})
		}
	}
}

var (
	ctxType = reflect.TypeFor[context.Context]()
	errType = reflect.TypeFor[error]()
)

// argument is a plausible argument of type typ: a live context, a function
// that does nothing, one permit, no duration.
func argument(typ reflect.Type) reflect.Value {
	switch {
	case typ == ctxType:
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = cancel // ends by its timeout
		return reflect.ValueOf(ctx)
	case typ.Kind() == reflect.Func:
		return reflect.MakeFunc(typ, func([]reflect.Value) []reflect.Value {
			out := make([]reflect.Value, typ.NumOut())
			for i := range out {
				out[i] = reflect.Zero(typ.Out(i))
			}
			return out
		})
	case typ.Kind() == reflect.Int:
		return reflect.ValueOf(1).Convert(typ)
	}
	return reflect.Zero(typ)
}

// checkResult checks one result of a call without an error on a zero
// value: a context already done, a channel, or the zero value.
func checkResult(t *testing.T, o reflect.Value) {
	t.Helper()
	switch {
	case o.Type() == ctxType:
		ctx, _ := o.Interface().(context.Context)
		if ctx == nil || ctx.Err() == nil {
			t.Errorf("context %v, want one already done", ctx)
		}
	case o.Kind() == reflect.Chan:
		if o.IsNil() {
			t.Errorf("a nil channel, which blocks forever where a handle's never-closed channel does too, but is not one")
		}
	default:
		if !o.IsZero() {
			t.Errorf("result %v, want the zero value", o)
		}
	}
}
