package fair_test

import (
	"context"
	"testing"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
)

func TestUncontendedLockUnlockIsTwoScriptCalls(t *testing.T) {
	e := newEnv(t)
	counter := &redistest.ScriptCounter{}
	e.client.AddHook(counter)
	m := e.named("a")
	mustLock(t, m) // loads the scripts
	mustUnlock(t, m)
	counter.Scripts.Store(0)
	mustLock(t, m)
	mustUnlock(t, m)
	if n := counter.Scripts.Load(); n != 2 {
		t.Fatalf("uncontended Lock+Unlock made %d script calls, want 2", n)
	}
}

func TestFairScriptsAreSafeToRunTwice(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	keys := keysFor()
	acquire := func(owner, entry, req string) []any {
		t.Helper()
		v, err := lua.Default().FairAcquire.Run(ctx, e.client, nil, keys, transport.FairAcquire{Owner: owner, Entry: entry, Request: req,
			Lease: 30000, Wait: 10000, Mode: transport.ModeJoin, Origin: "", Publish: "PUBLISH", Channel: channel}.Args()...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	first := acquire("o1", "o1/1", "r1")
	again := acquire("o1", "o1/1", "r1")
	if again[1] != first[1] || redistest.HoldField(t, e.mr, holdKey, "c") != "1" {
		t.Fatalf("a retried acquisition was applied twice: %v then %v", first, again)
	}
	acquire("o2", "o2/1", "r2") // queued
	acquire("o2", "o2/1", "r3") // a retried join: still one entry
	if l, _ := e.mr.List(holdKey + ":queue"); len(l) != 1 {
		t.Fatalf("a retried join queued the waiter twice: %v", l)
	}
	acquire("o3", "o3/1", "r4") // queued behind o2
	release := func() []any {
		t.Helper()
		v, err := lua.Default().FairRelease.Run(ctx, e.client, nil, keys, "o1", "r5", first[1], "PUBLISH", channel).Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	release()
	token := redistest.HoldField(t, e.mr, holdKey, "f")
	if again := release(); again[0] != int64(1) {
		t.Fatalf("a retried release answered %v, want its first answer {1}", again)
	}
	if o, tok := redistest.HoldField(t, e.mr, holdKey, "o"), redistest.HoldField(t, e.mr, holdKey, "f"); o != "o2" || tok != token {
		t.Fatalf("a retried release handed the lock on again: owner %q token %s (was o2, %s)", o, tok, token)
	}

	// The grantee releases before the retry comes (its request overwrites
	// the stored answer): the retry still gets {1}, and hands nothing on.
	v, err := lua.Default().FairRelease.Run(ctx, e.client, nil, keys, "o2", "r6", token, "PUBLISH", channel).Slice()
	if err != nil || v[0] != int64(1) {
		t.Fatalf("o2's release: %v, %v", v, err)
	}
	next := redistest.HoldField(t, e.mr, holdKey, "f")
	if again := release(); again[0] != int64(1) {
		t.Fatalf("a release retried after the next holder's release answered %v, want its first answer {1}", again)
	}
	if o, tok := redistest.HoldField(t, e.mr, holdKey, "o"), redistest.HoldField(t, e.mr, holdKey, "f"); o != "o3" || tok != next {
		t.Fatalf("the late retry changed the hold: owner %q token %s (was o3, %s)", o, tok, next)
	}
}

func TestAcquisitionWhoseReplyIsLostIsUndone(t *testing.T) {
	e := newEnv(t)
	lost := &redistest.LostReply{}
	client := e.process()
	client.AddHook(lost)
	a, b := e.handleOn(client, fair.WithLabel("a")), e.named("b")
	mustLock(t, a) // load the scripts
	mustUnlock(t, a)

	// A fresh acquisition whose reply is lost: the lock must not stay held.
	lost.Armed.Store(true)
	if err := a.Lock(context.Background()); err == nil {
		t.Fatal("Lock succeeded although its reply was lost")
	}
	if s := e.inspect(); s.Holder != nil || len(s.Queue) != 0 {
		t.Fatalf("after a lost acquisition reply: holder %+v, queue %+v; want a free, empty lock", s.Holder, s.Queue)
	}

	// A join whose reply is lost: the entry must not stay queued.
	mustLock(t, b)
	lost.Armed.Store(true)
	if err := a.Lock(context.Background()); err == nil {
		t.Fatal("Lock succeeded although its reply was lost")
	}
	if q := e.queued(); len(q) != 0 {
		t.Fatalf("a join whose reply was lost stayed queued: %v", q)
	}
	mustUnlock(t, b)
}
