package core

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// Owner is what the handles made on it share, and what ends them: a
// go-redis client, the inbox its waiters are told on (one pub/sub
// connection, or one per Cluster master), the fair queue's heartbeats,
// what it learnt of how the server runs scripts, and every hold and wait
// of its handles, which Close ends. It is made by fairlock.NewOwner, which
// documents it.
type Owner struct {
	client  redis.UniversalClient
	ids     *transport.IDs // its client id (its inbox of each lock), and its handles' ids
	publish string         // PUBLISH, or SPUBLISH on Cluster
	mode    transport.Mode
	clock   clock.Clock  // what drives every timer of its handles and hubs
	scripts *lua.Scripts // what its handles run

	// The restart check (restart.go): its period (0: none), and, under
	// mu, its timer while o holds anything or its links linger, the links
	// by server address, and since when o holds nothing; warned: it told
	// that it cannot run.
	restartEvery time.Duration
	restartTimer clock.Timer
	links        map[string]*link
	idleSince    time.Time
	warned       atomic.Bool

	// closing is cancelled, with cause ErrClosed, when Close begins: the
	// acquisitions in flight give up, and leave their queues.
	closing context.Context
	close   context.CancelCauseFunc
	closed  atomic.Bool // Close has begun: new calls get ErrClosed
	// draining is cancelled, with cause ErrClosed, when Drain (or Close)
	// begins: fresh acquisitions in flight give up, new ones are refused
	// (drained), and re-entries of running holds go on.
	draining context.Context
	drain    context.CancelCauseFunc
	drained  atomic.Bool
	done     chan struct{} // closed when Close's work is done
	closeErr error         // what it failed to release; set before done closes
	once     sync.Once

	hubs *transport.Hubs // its waiters' pub/sub connections

	presence *presence // WithPresence's subscription (presence.go); nil without

	mu       sync.Mutex
	services map[any]any // by *Service: what a primitive keeps per owner
	holds    map[*hold]struct{}
	// lastGranted is, per lock that grants one hold at a time
	// (Place.Exclusive), by its hold key, the owner's hold of it granted
	// last (track).
	lastGranted map[string]*hold
	noHolds     chan struct{} // closed when holds empties; nil while nobody waits (Drain)
	acquiring   tracker       // acquisitions in flight
	cleanups    tracker       // clean-up calls in flight (Bounded)

	// What its slots left in Redis lately, for a replay after a failover
	// (replay.go): the slots, by when they last recorded an exit, and when
	// the last replay began.
	pastMu   sync.Mutex
	pasts    map[*slot]time.Time
	prunedAt int // pasts' size at which track forgets the idle slots
	// following: the waiters' hub is moving (followHubs).
	following atomic.Bool
}

// Rig is what an owner's handles run on besides their client: the clock
// that drives every timer (the handles', their waits' and the hubs'), the
// scripts, and a probe that counts sleeping waiters (and, a PresenceProbe,
// hears of the presence). Tests make owners with
// a fake clock, seeded scripts and their probe (internal/redistest);
// fairlock.NewOwner's is the real clock, the library's scripts, and no probe. A
// zero field is the default.
type Rig struct {
	Clock   clock.Clock
	Scripts *lua.Scripts
	Probe   transport.Probe
	// RestartCheck is how often the owner, while it holds anything, PINGs
	// its servers on connections of its own to learn of a restart
	// (restart.go): 0 is DefaultRestartCheck (SessionPing, on its
	// presence connection, with Presence), a negative value turns the
	// check off.
	RestartCheck time.Duration
	// Presence makes the owner keep a presence (presence.go,
	// fairlock.WithPresence), on every kind of client.
	Presence bool
}

// KeepsPresence reports whether o keeps a presence.
func (o *Owner) KeepsPresence() bool { return o != nil && o.presence != nil }

// NewOwnerWith checks client and makes an owner of handles on it, run on
// rig.
func NewOwnerWith(client redis.UniversalClient, rig Rig) (*Owner, error) {
	if err := CheckClient(client); err != nil {
		return nil, err
	}
	if rig.Clock == nil {
		rig.Clock = clock.Real{}
	}
	if rig.Scripts == nil {
		rig.Scripts = lua.Default()
	}
	ids := transport.NewIDs()
	if rig.Presence {
		ids = transport.NewIDsWithPresence()
	}
	if rig.RestartCheck == 0 {
		rig.RestartCheck = DefaultRestartCheck
		if rig.Presence {
			rig.RestartCheck = SessionPing
		}
	}
	o := &Owner{client: client, ids: ids, publish: PublishCommand(client),
		clock: rig.Clock, scripts: rig.Scripts, restartEvery: max(rig.RestartCheck, 0),
		done: make(chan struct{}), hubs: transport.NewHubs(client, rig.Clock, rig.Probe), services: map[any]any{},
		holds: map[*hold]struct{}{}}
	o.closing, o.close = context.WithCancelCause(context.Background())
	o.draining, o.drain = context.WithCancelCause(context.Background())
	if rig.Presence {
		o.presence = newPresence(o, rig.Probe)
	}
	transport.Attach(&o.mode, client) // deadlines kept without a goroutine per call
	return o, nil
}

// Equip gives cfg, a handle's of o, o's clock and scripts.
func Equip(o *Owner, cfg *Config) {
	cfg.Clock, cfg.Scripts = o.clock, o.scripts
}

// CheckOwner rejects a nil or closed owner.
func CheckOwner(o *Owner) error {
	if o == nil || o.client == nil {
		return Invalid("owner must not be nil; make one with fairlock.NewOwner")
	}
	if o.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Client returns the go-redis client the owner's handles use.
func (o *Owner) Client() redis.UniversalClient {
	if o == nil || o.client == nil {
		return nil
	}
	return o.client
}

// Close ends everything of the owner, gracefully, so that nobody in other
// processes waits for it: new calls of its handles get ErrClosed, its
// waiters leave their queues (their Lock returns an error wrapping
// ErrClosed), its holds are ended (each hold's context with cause
// ErrClosed; Lost, which is for loss, stays open; Unlock then returns
// ErrClosed) and then released in Redis, handing each lock
// to the next in line at once, and its pub/sub connections close. It
// returns once Redis has confirmed all of it, or with ctx's error when ctx
// ends first (what is left goes on in the background, within the cleanup
// timeout, whatever the go-redis client's options); either way the holds
// it found have ended (their contexts) before it returns. Close is idempotent:
// every call waits for the same work, while its own ctx lasts, and returns
// its outcome. Close does not close the go-redis client.
func (o *Owner) Close(ctx context.Context) error {
	if o == nil || o.client == nil {
		return Invalid("owner must not be nil; make one with fairlock.NewOwner")
	}
	if err := CheckContext(ctx); err != nil {
		return err
	}
	o.once.Do(func() {
		o.closed.Store(true)
		o.drained.Store(true)
		o.drain(ErrClosed)
		o.close(ErrClosed)
		o.stopRestartCheck()
		// The holders stop believing before Close returns, whatever ctx
		// does (each hold's context ends with cause ErrClosed); their
		// releases in Redis come in shutdown.
		ended := o.endHolds()
		// The work goes on whatever ctx does: a go-redis client without
		// ContextTimeoutEnabled does not end a call at ctx's deadline, and
		// Close must not outlast it.
		go func() {
			o.closeErr = o.shutdown(ended)
			close(o.done)
		}()
	})
	select {
	case <-o.done:
		return o.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// endHolds ends the owner's holds as Close's (closeOut's first half: their
// contexts end with cause ErrClosed), and returns those it ended, for
// shutdown to release. A primitive's own lock held inside a call (a
// semaphore's gate: Config.Turn) is left to that call, which
// Close's cancellation ends, and to shutdown after it: its holder's calls
// give it on in order.
func (o *Owner) endHolds() []*hold {
	holds := o.heldWhere(func(h *hold) bool { return !h.cfg.Turn })
	ended := holds[:0]
	for _, h := range holds {
		if h.closeEnd() {
			ended = append(ended, h)
		}
	}
	return ended
}

// shutdown is Close's work: the waits end first (their contexts have
// ended), so that no hold is taken after the holds are released; then the
// holds, those Close ended as it began (ended) and any an acquisition in
// flight made since, each release bounded by its handle's cleanup timeout;
// then, with no waiter left, the hubs.
func (o *Owner) shutdown(ended []*hold) error {
	_ = o.acquiring.wait(context.Background())
	holds := o.heldWhere(func(*hold) bool { return true })
	var errs []error
	for _, h := range ended {
		if err := h.releaseAll(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, h := range holds {
		if err := h.closeOut(); err != nil {
			errs = append(errs, err)
		}
	}
	_ = o.cleanups.wait(context.Background())
	if o.presence != nil {
		o.presence.stop() // only now: the holds were kept until released
	}
	o.hubs.Close()
	return errors.Join(errs...)
}

// enter admits an acquisition: ErrClosed once Close has begun, or, for a
// fresh one (not a re-entry of a running hold), once Drain has; otherwise a
// context that also ends, with cause ErrClosed, when Close (fresh: or
// Drain) begins, and the function that ends the acquisition's stay.
func (o *Owner) enter(ctx context.Context, fresh bool) (context.Context, func(), error) {
	if fresh && o.drained.Load() && !o.closed.Load() {
		return nil, nil, errDraining
	}
	if !o.acquiring.add(&o.closed) {
		return nil, nil, ErrClosed
	}
	ends := o.closing
	if fresh {
		ends = o.draining // cancelled by Close too
	}
	c, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(ends, func() { cancel(ErrClosed) })
	return c, func() {
		stop()
		cancel(nil)
		o.acquiring.done()
	}, nil
}

// errDraining is what a fresh acquisition gets once Drain has begun; it
// wraps ErrClosed (made by Link).
var errDraining error

// Drain is a graceful Close for a rolling deploy: fresh acquisitions of the
// owner's handles are refused (ErrClosed) and those that wait give up and
// leave their queues, while the holds that run go on, re-entries included,
// until their Unlock; once none is left, the owner closes (Close). When
// ctx ends first, Close begins at once, as Close does (the holds left end
// with cause ErrClosed and go to the next in line), and Drain returns
// ctx's error.
func (o *Owner) Drain(ctx context.Context) error {
	if o == nil || o.client == nil {
		return Invalid("owner must not be nil; make one with fairlock.NewOwner")
	}
	if err := CheckContext(ctx); err != nil {
		return err
	}
	o.drained.Store(true)
	o.drain(ErrClosed)
	// The acquisitions in flight end first (their waits have ended): one
	// granted as the drain began is a running hold, waited for like any.
	if err := o.acquiring.wait(ctx); err != nil {
		_ = o.Close(ctx) // begins Close's work, which goes on in the background
		return err
	}
	o.mu.Lock()
	var gone chan struct{}
	if len(o.holds) > 0 {
		if o.noHolds == nil {
			o.noHolds = make(chan struct{})
		}
		gone = o.noHolds
	}
	o.mu.Unlock()
	if gone != nil {
		select {
		case <-gone:
		case <-ctx.Done():
			_ = o.Close(ctx) // begins Close's work, which goes on in the background
			return ctx.Err()
		}
	}
	return o.Close(ctx)
}

// heldWhere returns the owner's live holds for which keep is true, to act
// on outside o.mu (a hold that ends untracks itself).
func (o *Owner) heldWhere(keep func(*hold) bool) []*hold {
	o.mu.Lock()
	defer o.mu.Unlock()
	holds := make([]*hold, 0, len(o.holds))
	for h := range o.holds {
		if keep(h) {
			holds = append(holds, h)
		}
	}
	return holds
}

// track and untrack keep the owner's live holds, for Close. On a lock
// that grants one hold at a time, track returns the hold of the owner's
// that was granted it before h and is still tracked (nil if none): Redis
// has just granted h, so it no longer has that one, unless its Unlock is
// releasing it (adopt).
func (o *Owner) track(h *hold) (prev *hold) {
	o.mu.Lock()
	o.holds[h] = struct{}{}
	if h.agent.Exclusive {
		if o.lastGranted == nil {
			o.lastGranted = map[string]*hold{}
		}
		key := h.agent.Keys[0]
		prev = o.lastGranted[key]
		o.lastGranted[key] = h
	}
	o.watchRestartsLocked()
	o.mu.Unlock()
	return prev
}

func (o *Owner) untrack(h *hold) {
	o.mu.Lock()
	delete(o.holds, h)
	if h.agent.Exclusive && o.lastGranted[h.agent.Keys[0]] == h {
		delete(o.lastGranted, h.agent.Keys[0])
	}
	if len(o.holds) == 0 && o.noHolds != nil {
		close(o.noHolds)
		o.noHolds = nil
	}
	o.mu.Unlock()
}

// HubsOf is o's pub/sub connections, where its waiters subscribe.
func HubsOf(o *Owner) *transport.Hubs { return o.hubs }

// ScriptMode is what o learnt of how its server runs scripts.
func ScriptMode(o *Owner) *transport.Mode { return &o.mode }

// Service is a kind of state a primitive keeps per owner (the fair queue's
// heartbeats, an election's watches), declared once: Of returns an
// owner's, made by New at the first call. T guards itself.
type Service[T any] struct{ New func() *T }

// Of returns o's T.
func (s *Service[T]) Of(o *Owner) *T {
	o.mu.Lock()
	defer o.mu.Unlock()
	v, ok := o.services[s].(*T)
	if !ok {
		v = s.New()
		o.services[s] = v
	}
	return v
}

// tracker counts calls in flight, and waits for none to be left.
type tracker struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0; nil while nobody waits
}

// add counts a call in, unless closed is set (then false).
func (t *tracker) add(closed *atomic.Bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if closed != nil && closed.Load() {
		return false
	}
	t.n++
	return true
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 && t.zero != nil {
		close(t.zero)
		t.zero = nil
	}
	t.mu.Unlock()
}

// wait returns once no call is in flight, or ctx's error.
func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return nil
	}
	if t.zero == nil {
		t.zero = make(chan struct{})
	}
	zero := t.zero
	t.mu.Unlock()
	select {
	case <-zero:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Closing is cancelled, with cause ErrClosed, when o's Close begins: what
// serves o's handles outside an acquisition (an election's observers) ends
// with it.
func Closing(o *Owner) context.Context { return o.closing }
