package fairlock_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"
)

// The retry specification: any acquiring or releasing request may run twice
// (go-redis sends it again when its reply is lost), and the scripts keep no
// stored answers: a request that finds its own id in the hold reads its
// answer from the hold as it stands (retry.lua, acquired_answer). This
// property drives the fair lock's scripts directly, so that it can send any
// request again at any moment, and checks what that relies on:
//
//   - a retry that answers "held" names the very hold its first run was
//     granted (its token), never a hold made since by anyone else;
//   - while that hold stands as the request left it, the retry gets the first
//     run's answer and changes nothing;
//   - a retried release that kept the hold (re-entries remained) gets its
//     first answer and releases no second level;
//   - a release that undoes an acquiring request (its caller's ctx ended
//     before the answer) releases one level only if that request was
//     applied, and changes nothing otherwise.
//
// Handles take, re-enter and release the lock, queue, and let leases run
// out, so that holds end and new ones are made, by hand-off too, in calls
// that are not the retried request's.

const (
	retryLease = 2 * time.Second
	retryWait  = 3 * time.Second
)

type retryHandle struct {
	owner string
	joins int
	entry string // its queued entry, "" if none

	// Its last acquiring request that answered "held", and that answer.
	acquire []any
	granted []int64
	count   string // the hold's count just after that answer
	// Its last release that kept the hold, and that answer.
	release  []any
	released []int64
	// How many requests had been sent when each of those two ran.
	acquireSeq, releaseSeq int
}

type retrySpec struct {
	t       *rapid.T
	mr      *miniredis.Miniredis
	clk     *clock.Fake
	c       *redis.Client
	scripts *lua.Scripts
	keys    []string
	handles []*retryHandle
	reqs    int
}

func (s *retrySpec) call(sc *transport.Script, args ...any) []int64 {
	return runInts(s.t, sc, s.c, s.keys, args...)
}

// runInts runs a script and returns its integer reply as a list (a script
// that answers one integer gives a list of one).
func runInts(t *rapid.T, sc *transport.Script, c *redis.Client, keys []string, args ...any) []int64 {
	res, err := sc.Run(context.Background(), c, nil, keys, args...).Result()
	if err != nil {
		t.Fatalf("%v", err)
	}
	v, ok := res.([]any)
	switch {
	case ok:
	case strings.HasSuffix(sc.Function(), "_fair_acquire") || strings.HasSuffix(sc.Function(), "_reentrant_acquire"):
		v = []any{int64(1), res, int64(0)} // the uncontended path's bare token
	default:
		v = []any{res}
	}
	out := make([]int64, len(v))
	for i, e := range v {
		out[i] = e.(int64)
	}
	return out
}

// replay sends a recorded request again, as it was: one more request run.
func (s *retrySpec) replay(sc *transport.Script, args []any) []int64 {
	s.reqs++
	return s.call(sc, args...)
}

func (s *retrySpec) hold() map[string]string {
	raw, err := s.c.Get(context.Background(), s.keys[0]).Result()
	if err != nil {
		return map[string]string{}
	}
	fields, err := redistest.DecodeHold(raw)
	if err != nil {
		s.t.Fatalf("the hold is not of the layout: %v", err)
	}
	h := map[string]string{}
	for k, v := range fields {
		h[k] = fmt.Sprint(v)
	}
	return h
}

// snapshot is what a retry that changes nothing leaves as it was.
func (s *retrySpec) snapshot() string {
	h := s.hold()
	q, _ := s.c.LRange(context.Background(), s.keys[1], 0, -1).Result()
	d, _ := s.c.ZRangeWithScores(context.Background(), s.keys[2], 0, -1).Result()
	return fmt.Sprintf("o=%s c=%s f=%s x=%s e=%s g=%s q=%v d=%v", h["o"], h["c"], h["f"], h["x"], h["e"], h["g"], q, d)
}

func (s *retrySpec) acquire(t *rapid.T) {
	hd := rapid.SampledFrom(s.handles).Draw(t, "handle")
	mode := "join"
	if hd.entry == "" {
		hd.joins++
		hd.entry = fmt.Sprintf("%s/%d", hd.owner, hd.joins)
	} else {
		mode = "queued"
	}
	if rapid.Bool().Draw(t, "try") {
		mode = "try"
	}
	s.reqs++
	args := transport.FairAcquire{Owner: hd.owner, Entry: hd.entry, Request: fmt.Sprintf("%s#%d", hd.owner, s.reqs),
		Lease: retryLease.Milliseconds(), Wait: retryWait.Milliseconds(), Mode: mode, Origin: "",
		Publish: "PUBLISH", Channel: "retry", Stale: 0}.Args()
	r := s.call(s.scripts.FairAcquire, args...)
	switch {
	case r[0] == 1:
		hd.acquire, hd.granted, hd.entry, hd.acquireSeq = args, r, "", s.reqs
		hd.count = s.hold()["c"]
	case r[0] == -1 || mode == "try":
		hd.entry = ""
	}
}

func (s *retrySpec) release(t *rapid.T) {
	hd := rapid.SampledFrom(s.handles).Draw(t, "handle")
	h := s.hold()
	if h["o"] != hd.owner {
		t.Skip("not the holder")
	}
	s.reqs++
	args := []any{hd.owner, fmt.Sprintf("%s#%d", hd.owner, s.reqs), h["f"], "PUBLISH", "retry"}
	r := s.call(s.scripts.FairRelease, args...)
	if r[0] == 2 {
		hd.release, hd.released, hd.releaseSeq = args, r, s.reqs
	}
}

// undoRelease is the release a Lock sends when its ctx ended while its
// acquiring request ran: it names that request, whose answer it never got.
// A request that was not applied has nothing to undo: {0}, and nothing
// changes, even when the handle holds the lock by an earlier acquisition.
// One that was applied, with nothing since and its hold in force, is
// undone: one level of its hold is released.
func (s *retrySpec) undoRelease(t *rapid.T) {
	hd := rapid.SampledFrom(s.handles).Draw(t, "handle")
	h := s.hold()
	s.reqs++
	x, _ := strconv.ParseInt(h["x"], 10, 64)
	applied := hd.acquire != nil && s.reqs-1 == hd.acquireSeq && h["o"] == hd.owner &&
		h["f"] == strconv.FormatInt(hd.granted[1], 10) && x > s.clk.Now().UnixMilli() &&
		rapid.Bool().Draw(t, "undo the applied one")
	undo := fmt.Sprintf("%s#never%d", hd.owner, s.reqs)
	if applied {
		undo = hd.acquire[1].(string)
	}
	before := s.snapshot()
	r := s.call(s.scripts.FairRelease, hd.owner, fmt.Sprintf("%s#%d", hd.owner, s.reqs), "0", "PUBLISH", "retry", undo)
	if !applied {
		if !slices.Equal(r, []int64{0}) {
			t.Fatalf("undoing %s's request %s, never applied, answered %v, want {0} (hold %v)", hd.owner, undo, r, h)
		}
		if after := s.snapshot(); after != before {
			t.Fatalf("undoing a request never applied changed the lock:\n%s\n%s", before, after)
		}
		return
	}
	count, _ := strconv.ParseInt(h["c"], 10, 64)
	if want := []int64{1}; count == 1 && !slices.Equal(r, want) || count > 1 && !slices.Equal(r, []int64{2}) {
		t.Fatalf("undoing %s's applied request %s on a hold of count %d answered %v", hd.owner, undo, count, r)
	}
}

func (s *retrySpec) advance(t *rapid.T) {
	s.clk.Advance(time.Duration(rapid.IntRange(1, 3000).Draw(t, "ms")) * time.Millisecond)
}

func (s *retrySpec) retryAcquire(t *rapid.T) {
	hd := rapid.SampledFrom(s.handles).Draw(t, "handle")
	if hd.acquire == nil {
		t.Skip("no acquisition yet")
	}
	h := s.hold()
	first := hd.granted
	// The hold stands as the request left it: its id is the last, or no
	// request was sent since (whatever the scripts wrote).
	unchanged := (h["q"] == hd.acquire[1] || s.reqs == hd.acquireSeq) && h["o"] == hd.owner &&
		h["f"] == strconv.FormatInt(first[1], 10) && h["c"] == hd.count
	before := s.snapshot()
	again := s.replay(s.scripts.FairAcquire, hd.acquire)
	now := s.hold()
	if again[0] == 1 && again[1] != first[1] &&
		!(now["o"] == hd.owner && now["f"] == strconv.FormatInt(again[1], 10) && now["q"] == hd.acquire[1]) {
		// Not its first hold, nor a fresh one this very run made (a late
		// retry is a new request once others ran): a hold made since by
		// someone else, or none.
		t.Fatalf("%s's retried request %s answered held with token %d; its first run was granted %d, and Redis has %v",
			hd.owner, hd.acquire[1], again[1], first[1], now)
	}
	if unchanged {
		if !slices.Equal(again, first) {
			t.Fatalf("%s's retried request answered %v, its first run %v (hold %v)", hd.owner, again, first, h)
		}
		if after := s.snapshot(); after != before {
			t.Fatalf("%s's retried request changed the lock:\n%s\n%s", hd.owner, before, after)
		}
	}
	if again[0] == 1 {
		hd.granted, hd.count = again, now["c"]
	}
	// A late retry in join mode may have queued its entry again: it is
	// left to die by its deadline.
	hd.entry = ""
}

func (s *retrySpec) retryRelease(t *rapid.T) {
	hd := rapid.SampledFrom(s.handles).Draw(t, "handle")
	if hd.release == nil {
		t.Skip("no release that kept the hold")
	}
	h := s.hold()
	// The hold stands as the release left it: its id is the last, or no
	// request was sent since and the hold is still there (its keys did
	// not expire).
	if h["q"] != hd.release[1] && !(s.reqs == hd.releaseSeq && h["o"] == hd.owner && h["f"] == hd.release[2]) {
		t.Skip("another request ran since")
	}
	before := s.snapshot()
	again := s.replay(s.scripts.FairRelease, hd.release)
	if !slices.Equal(again, hd.released) {
		t.Fatalf("%s's retried release answered %v, its first run %v", hd.owner, again, hd.released)
	}
	if after := s.snapshot(); after != before {
		t.Fatalf("%s's retried release changed the lock:\n%s\n%s", hd.owner, before, after)
	}
}

func retrySpecOf(scripts *lua.Scripts) func(*rapid.T) {
	return func(t *rapid.T) {
		mr, clk := fakeServer(t)
		defer mr.Close()
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
		defer c.Close()
		base := "fairlock:f:{retry}"
		s := &retrySpec{t: t, mr: mr, clk: clk, c: c, scripts: scripts,
			keys: []string{base, base + ":queue", base + ":deadlines"}}
		for i := 0; i < 3; i++ {
			s.handles = append(s.handles, &retryHandle{owner: fmt.Sprintf("client.h%d", i)})
		}
		t.Repeat(map[string]func(*rapid.T){
			"acquire":      s.acquire,
			"release":      s.release,
			"advance":      s.advance,
			"retryAcquire": s.retryAcquire,
			"retryRelease": s.retryRelease,
			"undoRelease":  s.undoRelease,
		})
	}
}

func TestRetrySpecification(t *testing.T) {
	checkWith(t, 1000, retrySpecOf(lua.Default()))
}
