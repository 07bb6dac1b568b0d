package transport

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Script is one of fairlock's scripts (internal/lua builds them), runnable
// on any go-redis client.
type Script struct {
	lib  *Library
	fn   string        // its function in the library
	eval *redis.Script // the same script for EVAL
	src  string        // its source for EVAL
}

// NewScript returns the script whose function in lib is fn, and whose
// source, for EVAL, is src.
func NewScript(lib *Library, fn, src string) *Script {
	return &Script{lib: lib, fn: fn, eval: redis.NewScript(src), src: src}
}

// Library is the function library of one set of scripts: its name and
// its code, which FUNCTION LOAD takes.
type Library struct {
	Name string
	Code string
}

// Mode is what a caller learnt of how its server runs scripts, at its
// first call: as functions (FCALL) or, without Functions, with EVALSHA.
// One belongs to each fairlock.Owner; the zero value knows nothing yet.
// A nil *Mode always uses EVALSHA (a one-off call, such as Inspect). It
// also keeps the views of the owner's client that end calls by their
// deadlines (views.go).
type Mode struct {
	v     atomic.Int32
	views views
}

const (
	modeUnknown   int32 = iota
	modeFunctions       // FCALL
	modeEval            // no Functions: EVALSHA
)

func (m *Mode) get(c redis.UniversalClient) int32 {
	if m == nil {
		return modeEval
	}
	switch c.(type) {
	case *redis.Client, *redis.ClusterClient:
		return m.v.Load()
	}
	return modeEval // other kinds (wrappers, ...) always use EVALSHA
}

func (m *Mode) set(v int32) {
	if m != nil {
		m.v.Store(v)
	}
}

// Run runs the script with keys and args, like redis.Script.Run: as a
// function call where the server has Functions (loading the library when
// it is missing: at first use, after a restart without persistence, after
// FUNCTION FLUSH, on the new master of a moved slot), otherwise with
// EVALSHA. A call that failed for lack of the function did not run, so
// retrying it is safe.
//
// m is what the caller learnt of the server (Mode).
func (s *Script) Run(ctx context.Context, c redis.UniversalClient, m *Mode, keys []string, args ...any) *redis.Cmd {
	view, spawn := m.keep(ctx, c)
	if spawn {
		keys, args := slices.Clone(keys), slices.Clone(args) // copies, so that the caller's do not escape
		return bounded(ctx, func() *redis.Cmd { return s.run(ctx, c, nil, m, keys, args...) },
			func(a *Abandoned) *redis.Cmd { return failedCmd(ctx, a) })
	}
	cmd := s.run(ctx, c, view, m, keys, args...)
	if late(ctx, view != nil, cmd.Err()) {
		keys, args := slices.Clone(keys), slices.Clone(args)
		return failedCmd(ctx, wentOn(ctx, func(bg context.Context) error { return s.run(bg, c, nil, m, keys, args...).Err() }))
	}
	return cmd
}

// run is Run, in the caller's goroutine; on view (through the keeper) if
// it is not nil.
func (s *Script) run(ctx context.Context, c redis.UniversalClient, view *redis.Client, m *Mode, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	if ran, err := s.viaFunctions(ctx, c, m, keys, func() error {
		cmd = process(ctx, c, view, callWords(keys, args, "fcall", s.fn))
		return cmd.Err()
	}); ran {
		if err != nil {
			cmd.SetErr(err) // the call's own error, or the library's load's
		}
		return cmd
	}
	// As redis.Script.Run: EVALSHA, and EVAL if the server lacks the script.
	cmd = process(ctx, c, view, callWords(keys, args, "evalsha", s.eval.Hash()))
	if strings.HasPrefix(redisError(cmd.Err()), "NOSCRIPT") {
		cmd = process(ctx, c, view, callWords(keys, args, "eval", s.src))
	}
	return cmd
}

// callWords are the words of a script call: its command and script (or
// function), the key count, the keys, the arguments.
func callWords(keys []string, args []any, command, script string) []any {
	w := make([]any, 0, 3+len(keys)+len(args))
	w = append(w, command, script, len(keys))
	for _, k := range keys {
		w = append(w, k)
	}
	return append(w, args...)
}

// viaFunctions runs fcall, an FCALL of the script, as the client's server
// allows: it learns the client's mode at its first call, and loads the
// library when it is missing (library.load), then calls again. ran is false when the server has no Functions (or this user
// may not use them): the caller turns to EVALSHA. err is fcall's error, or
// the load's.
func (s *Script) viaFunctions(ctx context.Context, c redis.UniversalClient, m *Mode, keys []string, fcall func() error) (ran bool, err error) {
	known := m.get(c)
	if known == modeEval {
		return false, nil
	}
	switch err := fcall(); {
	case err == nil:
		if known == modeUnknown {
			m.set(modeFunctions)
		}
		return true, nil
	case unsupported(err):
		m.set(modeEval)
		return false, nil
	case functionMissing(err):
		lerr := s.lib.load(ctx, c, keys)
		if lerr == nil {
			m.set(modeFunctions)
			return true, fcall()
		}
		if !unsupported(lerr) {
			return true, lerr
		}
		m.set(modeEval)
		return false, nil
	default:
		return true, err // the script's own error, or the network's
	}
}

// Call is a script bound to the keys of one lock, with the fixed words of
// its FCALL (the function, the key count, the keys) boxed once: a call on a
// hot path then allocates for its changing arguments only.
type Call struct {
	s     *Script
	keys  []string
	fixed []any // "fcall", function, key count, keys...
}

// On binds s to keys.
func (s *Script) On(keys []string) *Call {
	fixed := []any{"fcall", s.fn, strconv.Itoa(len(keys))}
	for _, k := range keys {
		fixed = append(fixed, k)
	}
	return &Call{s: s, keys: keys, fixed: fixed}
}

// Run runs the script on c's keys with args, as Script.Run does.
func (c *Call) Run(ctx context.Context, client redis.UniversalClient, m *Mode, args ...any) *redis.Cmd {
	view, spawn := m.keep(ctx, client)
	if spawn {
		args := slices.Clone(args) // a copy, so that the caller's does not escape
		return bounded(ctx, func() *redis.Cmd { return c.run(ctx, client, nil, m, args...) },
			func(a *Abandoned) *redis.Cmd { return failedCmd(ctx, a) })
	}
	cmd := c.run(ctx, client, view, m, args...)
	if late(ctx, view != nil, cmd.Err()) {
		args := slices.Clone(args)
		return failedCmd(ctx, wentOn(ctx, func(bg context.Context) error { return c.run(bg, client, nil, m, args...).Err() }))
	}
	return cmd
}

// RunUntil is Run for a clean-up that must be made whole, as on a ctx from
// Finishing(ctx, m, client, until, what, fin), without making that ctx:
// kept is false, and nothing is run, when no view of client can end the
// call at until (the caller turns to Finishing, or a goroutine).
func (c *Call) RunUntil(ctx context.Context, client redis.UniversalClient, m *Mode, until time.Time, what string, fin Finisher, args ...any) (cmd *redis.Cmd, kept bool) {
	view := m.view(client, time.Until(until))
	if view == nil || fin == nil {
		return nil, false
	}
	cmd = c.run(ctx, client, view, m, args...)
	if late(ctx, true, cmd.Err()) {
		args := slices.Clone(args)
		a := goOn(ctx, what, fin, func(bg context.Context) error { return c.run(bg, client, nil, m, args...).Err() })
		return failedCmd(ctx, a), true
	}
	return cmd, true
}

// run is Run, in the caller's goroutine; on view (through the keeper) if
// it is not nil.
func (c *Call) run(ctx context.Context, client redis.UniversalClient, view *redis.Client, m *Mode, args ...any) *redis.Cmd {
	if m.get(client) != modeFunctions {
		// The first call on this client (which learns its mode), or no
		// Functions: copied, so that args does not escape on the hot path.
		return c.s.run(ctx, client, view, m, c.keys, append([]any(nil), args...)...)
	}
	words := make([]any, 0, len(c.fixed)+len(args))
	words = append(append(words, c.fixed...), args...)
	cmd := process(ctx, client, view, words)
	if err := cmd.Err(); err != nil && (functionMissing(err) || unsupported(err)) {
		// Flushed or never loaded on this node (a restart, a moved slot),
		// or Functions are gone: run loads the library, or turns to EVALSHA.
		return c.s.run(ctx, client, view, m, c.keys, append([]any(nil), args...)...)
	}
	return cmd
}

// RunWait runs the script like Run, followed on the same connection by
// WAIT replicas timeout, in one pipeline: WAIT counts the replicas that
// acknowledged every write of its connection so far, so the script's writes
// (and, replication being one ordered stream, every write before them) are
// covered. On Cluster the pipeline goes to the master that owns keys[0]. It
// returns the script's reply and the number of replicas that acknowledged
// (or the error of either).
func (s *Script) RunWait(ctx context.Context, c redis.UniversalClient, m *Mode, keys []string, replicas int, timeout time.Duration, args ...any) (*redis.Cmd, int64, error) {
	if needsBound(ctx, c) {
		type reply struct {
			cmd *redis.Cmd
			n   int64
			err error
		}
		keys, args := slices.Clone(keys), slices.Clone(args)
		r := bounded(ctx, func() reply {
			cmd, n, err := s.runWait(ctx, c, m, keys, replicas, timeout, args...)
			return reply{cmd, n, err}
		}, func(a *Abandoned) reply { return reply{failedCmd(ctx, a), 0, a} })
		return r.cmd, r.n, r.err
	}
	return s.runWait(ctx, c, m, keys, replicas, timeout, args...)
}

// runWait is RunWait, in the caller's goroutine.
func (s *Script) runWait(ctx context.Context, c redis.UniversalClient, m *Mode, keys []string, replicas int, timeout time.Duration, args ...any) (*redis.Cmd, int64, error) {
	conn := redis.Cmdable(c)
	if cc, ok := c.(*redis.ClusterClient); ok && len(keys) > 0 {
		node, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, 0, err
		}
		conn = node
	}
	run := func(fcall bool) (*redis.Cmd, int64, error) {
		pipe := conn.Pipeline()
		var cmd *redis.Cmd
		if fcall {
			cmd = pipe.FCall(ctx, s.fn, keys, args...)
		} else {
			cmd = pipe.EvalSha(ctx, s.eval.Hash(), keys, args...)
		}
		wait := pipe.Do(ctx, "WAIT", replicas, timeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		if err := cmd.Err(); err != nil {
			return cmd, 0, err
		}
		n, err := wait.Int64()
		return cmd, n, err
	}
	var cmd *redis.Cmd
	var n int64
	var werr error
	if ran, err := s.viaFunctions(ctx, c, m, keys, func() error {
		cmd, n, werr = run(true)
		return cmd.Err()
	}); ran {
		if err != nil {
			return cmd, 0, err
		}
		return cmd, n, werr // the script ran; a failed WAIT is the caller's to judge
	}
	cmd, n, err := run(false)
	if err != nil && strings.HasPrefix(redisError(err), "NOSCRIPT") {
		if lerr := conn.ScriptLoad(ctx, s.src).Err(); lerr != nil {
			return cmd, 0, lerr
		}
		return run(false)
	}
	return cmd, n, err
}

// load loads the library on the server; on Cluster, on every master the
// client knows. Not on the master that owns keys[0] alone: when a slot has
// just moved, the client's map may still name the old master (go-redis
// follows a MOVED reply at once but reloads its map later), and the library
// would go there again while the call that missed it goes to the new one.
func (l *Library) load(ctx context.Context, c redis.UniversalClient, keys []string) error {
	if cc, ok := c.(*redis.ClusterClient); ok && len(keys) > 0 {
		return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return node.FunctionLoadReplace(ctx, l.Code).Err()
		})
	}
	return c.FunctionLoadReplace(ctx, l.Code).Err()
}

// redisError returns the text of an error Redis replied with, or "".
func redisError(err error) string {
	if err == nil {
		return "" // before re, which escapes: no allocation for a call that succeeded
	}
	var re redis.Error
	if errors.As(err, &re) {
		return re.Error()
	}
	return ""
}

// unsupported: the server has no FCALL or FUNCTION command, or this user
// may not use them. (An unknown command called from inside a script reads
// "Unknown Redis command called from script": not this.)
func unsupported(err error) bool {
	msg := strings.ToLower(redisError(err))
	return strings.HasPrefix(msg, "err unknown command") || strings.HasPrefix(msg, "noperm")
}

// functionMissing: the server has Functions but not this one ("ERR Function
// not found").
func functionMissing(err error) bool {
	return strings.HasPrefix(strings.ToLower(redisError(err)), "err function not found")
}

// Function is the script's function in the library, as FCALL names it.
func (s *Script) Function() string { return s.fn }
