package fairlock_test

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// The uncontended paths (hold.lua's take_free and release_own, which
// fair_acquire.lua, fair_release.lua, reentrant_acquire.lua and
// reentrant_release.lua try first) must leave the hold as the general path
// would. Two locks start alike but for their waiters' horizon h: long
// passed on one (the uncontended paths may run), a millisecond ahead on the
// other with an empty queue (the general path runs and finds nobody, and
// drops h, which is put back before the release for the same reason). Each
// gets the same acquisition and release at the same Redis time; the
// replies (as the Go side reads them), the holds but h, and the keys' TTLs
// must agree. The starting holds cover what those paths drop or carry
// over: a hold that expired with the fields of its hand-off and presence
// still there, the fields that outlive holds, a release memory, and keys
// whose TTL the acquisition must push out (which the uncontended path
// leaves to the general one).
func TestUncontendedPathsWriteWhatTheGeneralPathWrites(t *testing.T) {
	uncontendedPathsAgreeWithTheGeneralPath(t, lua.Default())
}

// uncontendedPathsAgreeWithTheGeneralPath is the test above as a scenario
// (the mutation test's specification of the uncontended paths): each
// start is a subtest of t, or, where t runs no subtests (a rapid.T), a
// step of the same run.
func uncontendedPathsAgreeWithTheGeneralPath(t tb, s *lua.Scripts) {
	t.Helper()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ms := now.UnixMilli()
	at := func(d time.Duration) string { return strconv.FormatInt(ms+d.Milliseconds(), 10) }
	const owner = "QhOrGB6RQrKo9uyIgFu7VQ.1"
	starts := map[string]map[string]any{
		"kept long": {"v": "8", "f": "5", "k": at(time.Hour)},
		"an expired hold left behind": {"v": "8", "f": "7", "k": at(time.Hour), "o": "other.1", "c": "2", "x": at(-time.Second),
			"b": "h\t1\tl", "e": "other.1/3", "g": at(-2 * time.Second), "pa": at(-time.Second), "q": "other.1#9", "a": "1",
			"r": "0000000000000006", "wa": map[string]any{"c1~": at(-time.Minute)}, "wt": at(-time.Minute)},
		"keys to keep longer": {"v": "8", "f": "5", "k": at(0)},
		// A reentrant lock's last wake-up, not yet claimed: its waiter's
		// acquisition would be told it was freed for it (the general path).
		"a wake-up pending": {"v": "8", "f": "5", "k": at(time.Hour), "n": "other.1/5"},
	}
	// Where the uncontended acquisition may run: not where the keys must be
	// kept longer, nor where a wake-up is pending.
	straightAcquisition := map[string]bool{"kept long": true, "an expired hold left behind": true}
	kinds := []struct {
		name, base string
		acquire    func(s *lua.Scripts, c *redis.Client, base string) (raw, reply any, err error)
		release    func(s *lua.Scripts, c *redis.Client, base string, token int64) (raw, reply any, err error)
	}{
		{"fair", "fairlock:f:", func(s *lua.Scripts, c *redis.Client, base string) (any, any, error) {
			v, err := s.FairAcquire.Run(context.Background(), c, nil, transport.QueueKeys(base), transport.FairAcquire{
				Owner: owner, Entry: owner + "/1", Request: owner + "#1", Lease: 30000, Wait: 10000, Mode: transport.ModeJoin,
				Origin: transport.EscapeJSON(transport.EncodeOrigin("host", 1234, `a "job"`)), Publish: "PUBLISH", Channel: transport.Channel(base),
				Stale: transport.AnyStale,
			}.Args()...).Result()
			if err != nil {
				return nil, nil, err
			}
			r, err := transport.DecodeFairAcquire(v)
			return v, r, err
		}, func(s *lua.Scripts, c *redis.Client, base string, token int64) (any, any, error) {
			v, err := s.FairRelease.Run(context.Background(), c, nil, transport.QueueKeys(base), transport.Release{
				Owner: owner, Request: owner + "#2", Token: token, Publish: "PUBLISH", Channel: transport.Channel(base),
			}.Args()...).Result()
			if err != nil {
				return nil, nil, err
			}
			r, err := transport.DecodeRelease(v)
			return v, r, err
		}},
		{"reentrant", "fairlock:r:", func(s *lua.Scripts, c *redis.Client, base string) (any, any, error) {
			v, err := s.ReentrantAcquire.Run(context.Background(), c, nil, transport.QueueKeys(base), transport.ReentrantAcquire{
				Owner: owner, Request: owner + "#1", Lease: 30000, Stale: transport.AnyStale, Waiter: owner + "/1", Wait: 10000,
				AskFreed: true,
			}.Args()...).Result()
			if err != nil {
				return nil, nil, err
			}
			r, err := transport.DecodeReentrantAcquire(v)
			return v, r, err
		}, func(s *lua.Scripts, c *redis.Client, base string, token int64) (any, any, error) {
			v, err := s.ReentrantRelease.Run(context.Background(), c, nil, transport.QueueKeys(base), transport.Release{
				Owner: owner, Request: owner + "#2", Token: token, Publish: "PUBLISH", Channel: "fairlock:r:{x}:wake",
			}.Args()...).Result()
			if err != nil {
				return nil, nil, err
			}
			r, err := transport.DecodeRelease(v)
			return v, r, err
		}},
	}
	for _, kind := range kinds {
		for start, fields := range starts {
			if kind.name == "fair" && fields["n"] != nil {
				continue // a fair lock wakes nobody
			}
			func() {
				mr, err := miniredis.Run()
				if err != nil {
					t.Fatalf("miniredis: %v", err)
				}
				defer mr.Close()
				_ = mr.Set("fairlock:boot", "0") // a server long in use: no settling pause
				mr.SetTime(now)
				c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
				defer func() { _ = c.Close() }()
				horizons := map[string]string{"straight": at(-time.Second), "general": at(time.Millisecond)}
				for lock, h := range horizons {
					f := maps.Clone(fields)
					f["h"] = h
					if kind.name == "reentrant" {
						delete(f, "b") // a fair lock's hand-off and label: a reentrant lock has none
						delete(f, "e")
						delete(f, "g")
					}
					raw, err := redistest.EncodeHold(f)
					if err != nil {
						t.Fatalf("%v", err)
					}
					if err := mr.Set(kind.base+"{"+lock+"}", raw); err != nil {
						t.Fatalf("%v", err)
					}
					mr.SetTTL(kind.base+"{"+lock+"}", 50*time.Second)
				}
				type after struct {
					reply any
					hold  map[string]string
					ttl   time.Duration
				}
				look := func(lock string, reply any) after {
					hold := redistest.Hold(t, mr, kind.base+"{"+lock+"}")
					delete(hold, "h")
					return after{reply, hold, mr.TTL(kind.base + "{" + lock + "}")}
				}
				// The uncontended paths answer with a bare integer, the general
				// path with an array: the straight lock must have taken them
				// where straightAcquisition says, and the release where the
				// acquisition did (release_own takes a hold that take_free
				// made).
				compare := func(step string, straight bool, run func(base string) (any, any, error)) map[string]after {
					got := map[string]after{}
					for lock := range horizons {
						raw, reply, err := run(kind.base + "{" + lock + "}")
						if err != nil {
							t.Fatalf("%s/%s: %s of %s: %v", kind.name, start, step, lock, err)
						}
						if _, bare := raw.(int64); bare != (lock == "straight" && straight) {
							t.Fatalf("%s/%s: %s of %s answered %v: the wrong path ran", kind.name, start, step, lock, raw)
						}
						got[lock] = look(lock, reply)
					}
					a, b := got["straight"], got["general"]
					if fmt.Sprint(a.reply) != fmt.Sprint(b.reply) || !maps.Equal(a.hold, b.hold) || a.ttl != b.ttl {
						t.Fatalf("%s/%s: %s: the uncontended path left %+v, the general path %+v", kind.name, start, step, a, b)
					}
					return got
				}
				got := compare("acquisition", straightAcquisition[start], func(base string) (any, any, error) { return kind.acquire(s, c, base) })
				hold := got["straight"].hold
				if hold["o"] != owner || hold["c"] != "1" || hold["q"] != owner+"#1" || hold["e"] != "" || hold["pa"] != "" || hold["n"] != "" {
					t.Fatalf("after the acquisition the hold is %v; want it the owner's, once, with the request's id", hold)
				}
				if kind.name == "fair" && hold["b"] != "host\t1234\ta \"job\"" {
					t.Fatalf("the label was kept as %q", hold["b"])
				}
				token, err := strconv.ParseInt(hold["f"], 10, 64)
				if err != nil || token <= 7 {
					t.Fatalf("the token is %q, want one above the last", hold["f"])
				}
				// The general acquisition found no waiter left and dropped h, so
				// that the next pair takes the uncontended paths at once
				// (fair_acquire.lua, reentrant_acquire.lua): put it back a
				// millisecond ahead, or the general lock's release would take
				// them too.
				general := kind.base + "{general}"
				raw, _ := mr.Get(general)
				if !strings.HasPrefix(raw, `{"~":0,`) {
					t.Fatalf("%s/%s: the general acquisition found no waiter and kept the horizon: %s", kind.name, start, raw)
				}
				f, err := redistest.DecodeHold(raw)
				if err != nil {
					t.Fatalf("%v", err)
				}
				f["h"] = at(time.Millisecond)
				if raw, err = redistest.EncodeHold(f); err != nil {
					t.Fatalf("%v", err)
				}
				ttl := mr.TTL(general)
				if err := mr.Set(general, raw); err != nil {
					t.Fatalf("%v", err)
				}
				mr.SetTTL(general, ttl)
				got = compare("release", straightAcquisition[start], func(base string) (any, any, error) { return kind.release(s, c, base, token) })
				hold = got["straight"].hold
				if got["straight"].reply != transport.Released || hold["o"] != "" || hold["q"] != owner+"#2" || hold["r"][:16] != hold["f"] {
					t.Fatalf("after the release the reply is %v and the hold %v; want it free, with the release's id and memory",
						got["straight"].reply, hold)
				}
				if fields["wa"] != nil && hold["wa"] == "" {
					t.Fatalf("the fields that outlive holds were dropped: %v", hold)
				}
			}()
		}
	}
}
