package fairlock_test

import (
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fairlock/fairlock/internal/lua"
	"pgregory.net/rapid"
)

// A specification that passes whatever the scripts do proves nothing. Each
// mutation below is a plausible bug in one script; the specification must
// find every one of them.
var mutations = []struct {
	name, file, from, to string
	// spec is the specification that must catch it; nil: the fair lock's.
	spec func(*lua.Scripts) func(*rapid.T)
	// checks is how many checks it may take; 0: 1,000.
	checks int
}{
	{
		name: "a deadline that is never refreshed",
		file: "fair_heartbeat.lua",
		from: "redis.call('ZADD', KEYS[3], 'XX', int(now + wait), entry)",
		to:   "-- (refresh removed)",
	},
	{
		name: "eviction of a live head",
		file: "lib.lua",
		from: "if deadline > now then return head, popped end",
		to:   "if deadline > now + 2500 then return head, popped end",
	},
	{
		name: "enqueueing at the head",
		file: "fair_acquire.lua",
		from: "redis.call('RPUSH', KEYS[2],",
		to:   "redis.call('LPUSH', KEYS[2],",
	},
	{
		name: "a queue key without TTL",
		file: "lib.lua",
		from: "redis.call('PEXPIRE', key, int(keep - now))",
		to:   "if key ~= KEYS[2] then redis.call('PEXPIRE', key, int(keep - now)) end",
	},
	{
		name: "no head notice: a waiter that becomes head while the lock is held is not told when the hold ends",
		file: "lib.lua",
		from: "return head .. ' head ' .. int(expiry)",
		to:   "return 'nobody head ' .. int(expiry)",
	},
	{
		name: "a late retried release answers 'not held' although it released the lock",
		file: "fair_release.lua",
		from: "if released_hold(s, token) then return {1} end",
		to:   "-- (no memory of released holds)",
	},
	{
		name: "re-entry without an ownership check",
		file: "fair_acquire.lua",
		from: "if who == owner then",
		to:   "if who ~= nil then",
	},
	{
		name: "a semaphore newcomer passes the waiters",
		file: "sem_acquire.lua",
		from: "elseif holder(gate, now) or",
		to:   "elseif false and",
		spec: semaphoreSpec,
	},
	{
		name: "a semaphore grants one permit too many",
		file: "sem_acquire.lua",
		from: "if used + n > k then",
		to:   "if used + n > k + 1 then",
		spec: semaphoreSpec,
	},
	{
		name: "a semaphore release does not serve the first waiter",
		file: "sem_release.lua",
		from: "serve(s, w, used - mine.n, tonumber(s.m or '0'), now, now_us, ARGV[4], ARGV[5])",
		to:   "-- (no serving)",
		spec: semaphoreSpec,
	},
	{
		name: "waiters in the gate's queue are served past a first waiter whose request does not fit",
		file: "lib.lua",
		from: "if not blocked and tonumber(gate.h or '0') > now then",
		to:   "if tonumber(gate.h or '0') > now then",
		spec: semaphoreSpec,
		// It needs a blocked first waiter, a fitting one behind it and a
		// release of the right size at once: caught after 177, 350 and 656
		// checks, and once not within 1,000 (CI on 2026-11-23).
		checks: 5000,
	},
	{
		name: "serving the queue grants one permit too many",
		file: "lib.lua",
		from: "if owner == nil or n > k or used + n > k or s.p[owner] then break end",
		to:   "if owner == nil or n > k or used + n > k + 1 or s.p[owner] then break end",
		spec: semaphoreSpec,
	},
	{
		name: "permits served to a queued waiter outlive its place in the queue",
		file: "lib.lua",
		from: "local expiry = math.min(now + lease, deadline)",
		to:   "local expiry = now + lease + 60000",
		spec: semaphoreSpec,
	},
	{
		name: "a semaphore renewal that does not extend the hold",
		file: "sem_renew.lua",
		from: "local expiry = math.max(mine.x, from + lease)",
		to:   "local expiry = mine.x",
		spec: semaphoreSpec,
	},
	{
		name: "a fixed lease served to a waiter counts from its claim, not from its grant",
		file: "sem_renew.lua",
		from: "if ARGV[4] == '1' then from = mine.g end",
		to:   "-- (from now)",
		spec: semaphoreSpec,
	},
	{
		name: "raising a semaphore's permits does not serve the first waiter",
		file: "sem_set.lua",
		from: "serve(s, w, used, tonumber(ARGV[1]), now, now_us, ARGV[2], ARGV[3])",
		to:   "-- (no serving)",
		spec: semaphoreSpec,
	},
	{
		name: "the semaphore's state shows a hold's permits wrong",
		file: "sem_state.lua",
		from: "out[#out + 1] = h.n",
		to:   "out[#out + 1] = h.n % 2 + 1",
		spec: semaphoreSpec,
	},
	{
		name: "expired permit holds are counted",
		file: "lib.lua",
		from: "if n and x > now then",
		to:   "if n and x > now - 60000 then",
		spec: semaphoreSpec,
	},
	{
		name: "a token issued without clearing the last request: a retry takes a hold made since for its own",
		file: "lib.lua",
		from: "s.q, s.a = nil, nil",
		to:   "-- (q kept)",
		spec: retrySpecOf,
	},
	{
		name: "an acquiring request applied twice",
		file: "fair_acquire.lua",
		from: "if s.q == req then return acquired_answer(s, entry) end",
		to:   "-- (no retry check)",
		spec: retrySpecOf,
	},
	{
		name: "a retried release that kept the hold answers that it ended it",
		file: "fair_release.lua",
		from: "  w.a = w.c\n",
		to:   "",
		spec: retrySpecOf,
	},
	{
		name: "a downgraded write hold keeps all its permits",
		file: "sem_resize.lua",
		from: "s.p[owner] = permit_record(n, mine.x, token, mine.g, mine.label)",
		to:   "s.p[owner] = permit_record(mine.n, mine.x, token, mine.g, mine.label)",
		spec: rwMutexSpec,
	},
	{
		name: "a reader comes in beside a writer",
		file: "sem_acquire.lua",
		from: "if used + n > k then",
		to:   "if used + n > k and n == k then",
		spec: rwMutexSpec,
	},
}

func TestSpecificationCatchesBrokenScripts(t *testing.T) {
	if raceEnabled {
		// Broken scripts run in Redis: the race detector finds nothing in
		// them, and multiplies this test's time (10 minutes of the root
		// package's 18 under -race on 2 cores). .ci/run runs it without.
		t.Skip("the mutation test runs without -race: go test -run TestSpecificationCatchesBrokenScripts .")
	}
	// No shrinking and no fail files: only "does it fail" counts. Each run
	// stops at its first failure. Most mutations are caught within 200
	// checks, so 1,000 leaves a wide margin; one that needs a rare
	// coincidence says how many it may take (checks).
	for name, value := range map[string]string{"rapid.checks": "1000", "rapid.shrinktime": "1ms", "rapid.nofailfile": "true"} {
		old := flag.Lookup(name).Value.String()
		_ = flag.Set(name, value)
		defer flag.Set(name, old)
	}
	for _, mu := range mutations {
		t.Run(mu.name, func(t *testing.T) {
			if mu.checks > 0 {
				_ = flag.Set("rapid.checks", fmt.Sprint(mu.checks))
				defer flag.Set("rapid.checks", "1000")
			}
			src := lua.Sources()
			if !strings.Contains(src[mu.file], mu.from) {
				t.Fatalf("%s no longer contains %q: update the mutation", mu.file, mu.from)
			}
			src[mu.file] = strings.Replace(src[mu.file], mu.from, mu.to, 1)
			rec := &recorder{}
			prop := mu.spec
			if prop == nil {
				prop = fairLockSpec
			}
			rec.run(func() { rapid.Check(rec, prop(lua.MustBuild(src))) })
			if !rec.Failed() {
				t.Fatalf("the specification passed with %s", mu.name)
			}
			t.Logf("caught: %s", rec.firstError())
		})
	}
}

// recorder is a rapid.TB that records failures instead of failing the test.
type recorder struct {
	mu     sync.Mutex
	failed bool
	errs   []string
}

type stop struct{}

func (r *recorder) run(f func()) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(stop); !ok {
				panic(v)
			}
		}
	}()
	f()
}

func (r *recorder) Helper()                           {}
func (r *recorder) Name() string                      { return "mutation" }
func (r *recorder) Logf(format string, args ...any)   {}
func (r *recorder) Log(args ...any)                   {}
func (r *recorder) Skipf(format string, args ...any)  { panic(stop{}) }
func (r *recorder) Skip(args ...any)                  { panic(stop{}) }
func (r *recorder) SkipNow()                          { panic(stop{}) }
func (r *recorder) Errorf(format string, args ...any) { r.record(fmt.Sprintf(format, args...)) }
func (r *recorder) Error(args ...any)                 { r.record(fmt.Sprint(args...)) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.record(fmt.Sprintf(format, args...))
	panic(stop{})
}
func (r *recorder) Fatal(args ...any) { r.record(fmt.Sprint(args...)); panic(stop{}) }
func (r *recorder) FailNow()          { r.Fail(); panic(stop{}) }
func (r *recorder) Fail()             { r.mu.Lock(); r.failed = true; r.mu.Unlock() }

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) record(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.errs = append(r.errs, msg)
}

func (r *recorder) firstError() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.errs {
		if i := strings.Index(e, "\n"); i > 0 {
			e = e[:i]
		}
		if strings.TrimSpace(e) != "" {
			return e
		}
	}
	return ""
}
