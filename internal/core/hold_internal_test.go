package core

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/redis/go-redis/v9"
)

// A hold that ends as lost is recorded as the handle's stale hold before
// its Lost channel closes and its context ends: a caller that reacts by
// acquiring again must send the stale token with that request, or the
// script would take the call for a re-entry of the hold Redis still has (a
// client stops believing in a lease a margin before Redis expires it).
// The fault suite's history check once caught the order reversed.
func TestLostClosesOnlyOnceTheStaleTokenIsRecorded(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	cfg := NewConfig()
	cfg.Clock = clock.NewFake(time.Unix(1_700_000_000, 0), nil)
	o, err := NewOwnerWith(client, Rig{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMutex(o, "stale", cfg, func(string, *lua.Scripts) Place { return Place{Keys: []string{"k"}} })
	if err != nil {
		t.Fatal(err)
	}
	for token := int64(1); token <= 200; token++ {
		h, _ := newHold(m, m.first, Grant{Token: token, Since: cfg.Clock.Now()}, time.Minute, true)
		seen := make(chan int64, 2)
		go func() { <-h.Lost(); seen <- m.first.stale.Load() }()
		stop := context.AfterFunc(h.Context(), func() { seen <- m.first.stale.Load() })
		h.end(ErrLockLost, "test")
		for range 2 {
			if got := <-seen; got != token {
				t.Fatalf("hold %d: its Lost or context said so while the stale token was %d", token, got)
			}
		}
		stop()
	}
}

// A hold that a timer ended after it was due is logged with how late
// (late): its holder believed that much longer than the library meant
// (docs/presence.md). One ended on time, or by anything but a timer, is
// logged without it.
func TestALateLossSaysHowLate(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	var logs strings.Builder
	cfg := NewConfig()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0), nil)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	o, err := NewOwnerWith(client, Rig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMutex(o, "late", cfg, func(string, *lua.Scripts) Place { return Place{Keys: []string{"k"}} })
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		end  func(h *hold)
		want string
	}{
		{"a timer 30 ms late", func(h *hold) { h.lose("test", clk.Now().Add(-30*time.Millisecond)) }, "late=30ms"},
		{"a timer on time", func(h *hold) { h.lose("test", clk.Now()) }, ""},
		{"no timer", func(h *hold) { h.end(ErrLockLost, "test") }, ""},
	} {
		logs.Reset()
		h, _ := newHold(m, m.first, Grant{Token: 1, Since: clk.Now()}, time.Minute, true)
		c.end(h)
		line := logs.String()
		if !strings.Contains(line, `msg="fairlock: lock lost: test"`) {
			t.Fatalf("%s: logged %q, want the loss", c.name, line)
		}
		if got := strings.Contains(line, "late="); got != (c.want != "") || !strings.Contains(line, c.want) {
			t.Errorf("%s: logged %q, want %q", c.name, line, c.want)
		}
	}
}
