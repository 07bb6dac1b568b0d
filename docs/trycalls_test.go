package docs_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/multi"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// migrating.md: a try whose wait elapsed answers false, nil from every
// TryLock and TryRLock, and nil with an error wrapping fair.ErrNotAcquired
// from Semaphore.TryAcquire; each doc comment says the same. Both with wait
// 0 (one attempt) and with a wait that runs out while queued.
func TestTryCallsAnswerAnElapsedWaitAsTheDocsSay(t *testing.T) {
	redistest.NoLeaks(t)
	mr, clk, c := redistest.Mini(t)
	ctx := context.Background()
	holder := redistest.OwnerOn(c, clk, nil)                               // holds everything
	oc := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1}) // another process
	t.Cleanup(func() { _ = oc.Close() })
	other := redistest.OwnerOn(oc, clk, nil)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	held, err := fair.New(holder, "f")
	must(err)
	must(held.Lock(ctx))
	tryFair, err := fair.New(other, "f")
	must(err)

	heldR, err := reentrant.New(holder, "r")
	must(err)
	must(heldR.Lock(ctx))
	tryR, err := reentrant.New(other, "r")
	must(err)

	heldRW, err := fair.NewRWMutex(holder, "rw")
	must(err)
	must(heldRW.Lock(ctx))
	tryRW, err := fair.NewRWMutex(other, "rw")
	must(err)

	heldS, err := fair.NewSemaphore(holder, "s", 1)
	must(err)
	p, err := heldS.Acquire(ctx, 1)
	must(err)
	tryS, err := fair.NewSemaphore(other, "s", 1)
	must(err)

	tryMulti, err := multi.New(tryFair, tryR)
	must(err)

	heldRed, err := multi.NewRedLock([]*fairlock.Owner{holder}, "red")
	must(err)
	must(heldRed.Lock(ctx))
	tryRed, err := multi.NewRedLock([]*fairlock.Owner{other}, "red")
	must(err)

	boolTries := map[string]func(wait time.Duration) (bool, error){
		"fair Mutex.TryLock":      func(w time.Duration) (bool, error) { return tryFair.TryLock(ctx, w, 0) },
		"reentrant Mutex.TryLock": func(w time.Duration) (bool, error) { return tryR.TryLock(ctx, w, 0) },
		"RWMutex.TryLock":         func(w time.Duration) (bool, error) { return tryRW.TryLock(ctx, w, 0) },
		"RWMutex.TryRLock":        func(w time.Duration) (bool, error) { return tryRW.TryRLock(ctx, w, 0) },
		"multi.Lock.TryLock":      func(w time.Duration) (bool, error) { return tryMulti.TryLock(ctx, w, 0) },
		"RedLock.TryLock":         func(w time.Duration) (bool, error) { return tryRed.TryLock(ctx, w, 0) },
	}
	for what, try := range boolTries {
		for _, wait := range []time.Duration{0, time.Second} {
			ok, err := elapse(t, clk, wait, func() (bool, error) { return try(wait) })
			if ok || err != nil {
				t.Errorf("%s with wait %v, the lock held elsewhere = %v, %v; the docs say false, nil", what, wait, ok, err)
			}
		}
	}
	for _, wait := range []time.Duration{0, time.Second} {
		var got *fair.Permit
		_, err := elapse(t, clk, wait, func() (bool, error) {
			var err error
			got, err = tryS.TryAcquire(ctx, 1, wait, 0)
			return got != nil, err
		})
		if got != nil || !errors.Is(err, fair.ErrNotAcquired) {
			t.Errorf("Semaphore.TryAcquire with wait %v, every permit held = %v, %v; the docs say nil and an error wrapping ErrNotAcquired", wait, got, err)
		}
	}

	must(held.Unlock(ctx))
	must(heldR.Unlock(ctx))
	must(heldRW.Unlock(ctx))
	must(p.Release(ctx))
	must(heldRed.Unlock(ctx))
}

// elapse runs try, moving the fake clock on until it returns, which must
// not be before its wait elapsed.
func elapse(t *testing.T, clk *clock.Fake, wait time.Duration, try func() (bool, error)) (bool, error) {
	t.Helper()
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		ok, err := try()
		done <- result{ok, err}
	}()
	start := clk.Now()
	for {
		select {
		case r := <-done:
			if took := clk.Now().Sub(start); took < wait {
				t.Errorf("a try with wait %v returned %v, %v after %v (fake clock): before its wait elapsed", wait, r.ok, r.err, took)
			}
			return r.ok, r.err
		case <-time.After(time.Millisecond):
		}
		if clk.Now().Sub(start) > wait+10*time.Second {
			t.Fatalf("a try with wait %v had not returned %v later (fake clock)", wait, clk.Now().Sub(start))
		}
		clk.Advance(10 * time.Millisecond)
	}
}

// The doc comment of every try call says what its elapsed wait returns.
func TestTryCallsDocCommentsSayWhatAnElapsedWaitReturns(t *testing.T) {
	says := map[string]string{"TryLock": "false, nil", "TryRLock": "false, nil", "TryAcquire": "ErrNotAcquired"}
	found := 0
	for _, dir := range apiPackages {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range file.Decls {
				d, ok := decl.(*ast.FuncDecl)
				if !ok || d.Recv == nil || says[d.Name.Name] == "" {
					continue
				}
				found++
				if doc := strings.Join(strings.Fields(d.Doc.Text()), " "); !strings.Contains(doc, says[d.Name.Name]) {
					t.Errorf("%s: the doc comment of %s does not say that a wait that elapsed returns %s:\n%s", f, d.Name.Name, says[d.Name.Name], d.Doc.Text())
				}
			}
		}
	}
	if found < 6 { // Mutex, RWMutex (2), Semaphore, multi.Lock, RedLock
		t.Fatalf("found %d try calls, want at least 6", found)
	}
}
