package transport

import (
	"context"
	"errors"
	"math/bits"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// A view of a *redis.Client is a clone that shares its connection pool but
// has other read and write timeouts (go-redis's Client.WithTimeout). A
// script call whose ctx has a deadline go-redis would not keep (needsBound)
// runs in its caller's goroutine on the view whose timeout is the time
// left, rounded up to one of viewSteps steps per doubling: it ends at most
// 1/32 of that time after the deadline (3 ms of a 100 ms deadline),
// however Redis behaves, and go-redis does not try it again (it tries
// again only while ctx lasts). A goroutine per call, which kept the
// deadline before, cost an uncontended Lock+Unlock more than the rest of
// the client's work (docs/performance.md, round five).
//
// A view has none of its client's hooks (go-redis clones none), so the
// call is not made on it directly: it is made on the client, as every
// call is, wrapped (keptCmd), and a hook of fairlock's own (keeper), added
// to the client when an owner is made on it (Attach), sends it on to the
// view once the client's other hooks have seen it. Hooks added to the
// client after that are not reached by such calls. Clients without views
// (Cluster, Ring, wrappers, a client that ends calls at their deadline
// itself) keep the goroutine or need none.
//
// Views are made at first use, at most one per step, and kept for the
// owner's life: closing one would close the pool they share.
const (
	viewSteps    = 32 // per doubling of the time left
	viewMinShift = 20 // 2^20 ns, about 1 ms: the shortest view
	viewMaxShift = 40 // 2^40 ns, about 18 minutes: longer gets a goroutine
)

// views are an owner's views of its client, by step.
type views struct {
	of atomic.Pointer[redis.Client] // the client they view, once Attach added its keeper
	by [(viewMaxShift - viewMinShift) * viewSteps]atomic.Pointer[redis.Client]
}

// Attach readies m to keep deadlines of calls on c without a goroutine:
// for a *redis.Client that does not end calls at their ctx's deadline by
// itself, it adds the keeper hook to c (once per client, whatever the
// number of owners made on it).
func Attach(m *Mode, c redis.UniversalClient) {
	cl, ok := c.(*redis.Client)
	if !ok || boundsCalls(c) {
		return
	}
	key := weak.Make(cl)
	if _, had := keepers.LoadOrStore(key, struct{}{}); !had {
		cl.AddHook(keeper{})
		runtime.AddCleanup(cl, func(key weak.Pointer[redis.Client]) { keepers.Delete(key) }, key)
	}
	m.views.of.Store(cl)
}

// keepers are the clients Attach added a keeper to: go-redis has no way to
// list a client's hooks, and each further keeper would be one more hook on
// every command of the client. Weak, so a client no longer used is freed.
var keepers sync.Map // weak.Pointer[redis.Client] -> struct{}

// keeper is the hook that makes a keptCmd on its view. Innermost when
// added (go-redis runs the last hook added closest to the connection), it
// comes after the hooks the client had (tracing, metrics), which see the
// call as any other.
type keeper struct{}

func (keeper) DialHook(next redis.DialHook) redis.DialHook { return next }

func (keeper) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if k, ok := cmd.(*keptCmd); ok {
			return k.view.Process(ctx, &k.Cmd)
		}
		return next(ctx, cmd)
	}
}

func (keeper) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// keptCmd is a command to be made on view, by the keeper.
type keptCmd struct {
	redis.Cmd
	view *redis.Client
}

// process makes a command of words on c: on view, through the keeper, if
// view is not nil.
func process(ctx context.Context, c redis.UniversalClient, view *redis.Client, words []any) *redis.Cmd {
	if view == nil {
		cmd := redis.NewCmd(ctx, words...)
		_ = c.Process(ctx, cmd)
		return cmd
	}
	k := &keptCmd{Cmd: *redis.NewCmd(ctx, words...), view: view}
	_ = c.Process(ctx, k)
	return &k.Cmd
}

// viewStep is the step of a call with left to go: its index in views.by
// and its timeout, the first step at least left; false when left is too
// long for a view.
func viewStep(left time.Duration) (int, time.Duration, bool) {
	n := uint64(max(left, 1<<viewMinShift))
	shift := bits.Len64(n) - 1 - 5 // n>>shift is in [32, 64): 5 bits after the first
	step := n >> shift
	if n&(1<<shift-1) != 0 {
		step++ // round up: the view ends the call at or after the deadline
	}
	if step == 2*viewSteps {
		step, shift = viewSteps, shift+1
	}
	i := (shift+5-viewMinShift)*viewSteps + int(step) - viewSteps
	if i >= len(views{}.by) {
		return 0, 0, false
	}
	return i, time.Duration(step << shift), true
}

// view returns the view of c for a call with left to go, nil when c has
// no views (not the client m was attached to).
func (m *Mode) view(c redis.UniversalClient, left time.Duration) *redis.Client {
	cl, ok := c.(*redis.Client)
	if m == nil || !ok || m.views.of.Load() != cl {
		return nil
	}
	i, timeout, ok := viewStep(left)
	if !ok {
		return nil
	}
	if v := m.views.by[i].Load(); v != nil {
		return v
	}
	v := cl.WithTimeout(timeout)
	if m.views.by[i].CompareAndSwap(nil, v) {
		return v
	}
	return m.views.by[i].Load()
}

// keep says how a call on c with ctx keeps ctx's deadline: on a view of c
// (view), on a goroutine of its own (spawn: no view serves c), or neither
// (go-redis keeps it, or there is none).
func (m *Mode) keep(ctx context.Context, c redis.UniversalClient) (view *redis.Client, spawn bool) {
	if !needsBound(ctx, c) {
		return nil, false
	}
	d, _ := ctx.Deadline()
	if v := m.view(c, time.Until(d)); v != nil {
		return v, false
	}
	return nil, true
}

// late reports whether a call that failed with err on a view (viewed), or
// on a ctx from Finishing, failed because its deadline came: ctx's end, or
// a timeout at ctx's deadline (the view's). Such a call may have run in
// Redis. A timeout sooner, a dial's (DialTimeout), is an error like any
// other: the call was never sent, and a wait tries again.
func late(ctx context.Context, viewed bool, err error) bool {
	if err == nil || (!viewed && finishingOf(ctx) == nil) {
		return false
	}
	if ctx.Err() != nil {
		return true
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d.Add(-time.Millisecond))
}

// wentOn is the error of a call that its deadline ended (late): an
// Abandoned wrapping ctx's error, once ctx has ended (a view rounds its
// timeout up, but go-redis counts it from a clock it caches: the call may
// fail a little before ctx ends). A call on a ctx from Finishing is made
// again in the background at once by its Finisher (resend: the same
// request, which every script answers as it did the first time); its
// Done closes when that call returns.
func wentOn(ctx context.Context, resend func(context.Context) error) *Abandoned {
	if f := finishingOf(ctx); f != nil {
		return goOn(f.Context, f.what, f.fin, resend)
	}
	if ctx.Done() != nil {
		<-ctx.Done()
	} else if d, ok := ctx.Deadline(); ok {
		time.Sleep(time.Until(d))
	}
	cause := ctx.Err()
	if cause == nil {
		cause = context.DeadlineExceeded
	}
	return &Abandoned{Cause: cause, Done: closedChan}
}

// goOn hands resend, a clean-up its caller no longer waits for, to fin,
// to make again in the background; the Abandoned error's Done closes when
// that call returns.
func goOn(ctx context.Context, what string, fin Finisher, resend func(context.Context) error) *Abandoned {
	done := make(chan struct{})
	fin.GoOn(ctx, what, func(bg context.Context) error {
		defer close(done)
		return resend(Detached(bg))
	})
	return &Abandoned{Cause: context.DeadlineExceeded, Done: done}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// A Finisher makes a clean-up call again in the background, on a
// context of its own (bounded by its cleanup timeout), when Redis did not
// answer it by its caller's deadline: what names the call in its log.
type Finisher interface {
	GoOn(ctx context.Context, what string, call func(context.Context) error)
}

// Finishing returns a ctx for a clean-up call that must be made whole (a
// release, leaving a queue) but whose caller waits for it only until
// until (its deadline and a grace): it keeps ctx's values and
// cancellation, and has until as its deadline. A script call on it runs in
// the caller's goroutine, ended at until by a view of c or by go-redis
// itself (ContextTimeoutEnabled); if Redis has not answered by then, the
// call fails with an Abandoned error, and fin makes the same call again in
// the background. nil when neither can end a call on c at until (the
// caller must bound the call itself), or fin is nil.
func Finishing(ctx context.Context, m *Mode, c redis.UniversalClient, until time.Time, what string, fin Finisher) context.Context {
	if fin == nil || (!boundsCalls(c) && m.view(c, time.Until(until)) == nil) {
		return nil
	}
	return &finishing{Context: ctx, until: until, what: what, fin: fin}
}

type finishing struct {
	context.Context
	until time.Time
	what  string
	fin   Finisher
}

type finishingKey struct{}

func (f *finishing) Deadline() (time.Time, bool) { return f.until, true }

func (f *finishing) Value(key any) any {
	if key == (finishingKey{}) {
		return f
	}
	return f.Context.Value(key)
}

func finishingOf(ctx context.Context) *finishing {
	f, _ := ctx.Value(finishingKey{}).(*finishing)
	return f
}
