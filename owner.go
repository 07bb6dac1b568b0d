package fairlock

import (
	"github.com/fairlock/fairlock/internal/core"
	"github.com/redis/go-redis/v9"
)

// Owner owns the handles made on it (fair.New, reentrant.New, ...) and
// what they share: one go-redis client, the inbox its waiters are told on
// (one pub/sub connection, or one per Cluster master, opened when a handle
// first waits), the fair queue's heartbeats (one script call per beat for
// all its waiters on one lock), what it learnt of how the server runs
// scripts, and, while it holds anything, one connection of its own per
// server (per Cluster master) that it PINGs every 500 ms: a restart or
// failover breaks it, and every hold is then renewed at once, so that a
// holder learns within about half a second that Redis lost its keys. Make
// one per client and process, at start, and share it; two owners on one
// client are correct and independent, each with its own inbox.
//
// Its method Close(ctx) error is a graceful shutdown, for the end of the
// process or of a test: new calls of its handles get ErrClosed; its waiters
// leave their queues (their Lock returns an error wrapping ErrClosed), so
// that nobody behind them in other processes waits for them; its holds end
// (each hold's context with cause ErrClosed, and Lost closes) and are then
// released in Redis, handing each lock to the next in line at once; its
// pub/sub connections close. Close returns once Redis has confirmed all of
// it, or with ctx's error when ctx ends first, whatever the go-redis
// client's options (what is left goes on in the background, each release
// within its handle's cleanup timeout). It is idempotent, and does not close
// the go-redis client: close that after the owner.
//
// Its method Client() returns the go-redis client.
type Owner = core.Owner

// MaxNameLen bounds the name of a lock of any kind, in bytes (1,024): every
// key and channel of the lock carries it. A longer name, a file path or a
// URL say, can be hashed first. A constructor given a longer one returns an
// error wrapping ErrInvalidArgument.
const MaxNameLen = core.MaxNameLen

// ErrInvalidArgument is wrapped by every error about bad input; the same
// value as every primitive package's.
var ErrInvalidArgument = core.ErrInvalidArgument

// ErrClosed is returned by the calls of a handle whose Owner was closed,
// and is the cause of the context of a hold or a wait that Close ended.
var ErrClosed = core.ErrClosed

// NewOwner returns an owner of handles on client: a *redis.Client, a
// Sentinel client (redis.NewFailoverClient) or a *redis.ClusterClient, or
// any redis.UniversalClient but a *redis.Ring. It talks to Redis only when
// a handle is used. A nil client or a *redis.Ring gets an error wrapping
// ErrInvalidArgument.
func NewOwner(client redis.UniversalClient) (*Owner, error) { return core.NewOwner(client) }
