package redistest

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// seen is a hook that records the arguments of every command sent.
type seen struct {
	mu   sync.Mutex
	args [][]any
}

func (s *seen) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *seen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.mu.Lock()
		s.args = append(s.args, cmd.Args())
		s.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (s *seen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Calls knows a script's calls as a server gets them: EVALSHA and EVAL on
// miniredis (no Functions), FCALL on Redis 7, and no other script's.
func TestCallsKnowsAScriptsCalls(t *testing.T) {
	scripts := lua.Default()
	mr := miniredis.RunT(t)
	mini := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = mini.Close() })
	clients := map[string]*redis.Client{"miniredis": mini}
	if os.Getenv(envSingle) != "" {
		clients["redis"] = RealOrMini(t)
	}
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			s := &seen{}
			c.AddHook(s)
			var m transport.Mode
			keys := []string{"{calls-" + name + "}"}
			// A missing script on miniredis: EVALSHA, then EVAL; again, EVALSHA.
			for range 2 {
				_ = scripts.Renew.Run(context.Background(), c, &m, keys, "nobody", 1, 1000, 0).Err()
			}
			var calls []string
			others := 0
			for _, args := range s.args {
				switch {
				case Calls(scripts.Renew, args):
					calls = append(calls, strings.ToLower(args[0].(string)))
				case Calls(scripts.FairAcquire, args):
					others++
				}
			}
			got, want := strings.Join(calls, " "), "fcall evalsha eval evalsha" // miniredis has no Functions: the first call learns it
			if name == "redis" {
				// FCALLs, one more if the first found no library.
				want = "fcall fcall"
				if got == "fcall fcall fcall" {
					got = want
				}
			}
			if got != want || others != 0 {
				t.Fatalf("Calls knew renew's calls as %q (want %q) and %d as fair_acquire's (want 0), of %v", got, want, others, s.args)
			}
		})
	}
}
