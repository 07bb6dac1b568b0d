package lua_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { redistest.Exit(m) }

// commands records the script-related commands a client sends (FCALL,
// FUNCTION, EVALSHA, EVAL; on Cluster, FUNCTION goes through a node's own
// client and is not seen).
type commands struct {
	mu    sync.Mutex
	names []string
}

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch name := strings.ToLower(cmd.Name()); name {
		case "fcall", "function", "evalsha", "eval":
			c.mu.Lock()
			c.names = append(c.names, name)
			c.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (c *commands) take() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.Join(c.names, " ")
	c.names = nil
	return s
}

// modeOf is what the tests' calls on c learnt of its server, as an owner
// of handles on c keeps it.
func modeOf(c redis.UniversalClient) *transport.Mode {
	m, _ := modes.LoadOrStore(c, &transport.Mode{})
	return m.(*transport.Mode)
}

var modes sync.Map // redis.UniversalClient -> *transport.Mode

// state runs state.lua (read-only) on a lock that does not exist: {}.
func state(t *testing.T, s *lua.Scripts, c redis.UniversalClient, name string) {
	t.Helper()
	v, err := s.State.Run(context.Background(), c, modeOf(c), []string{"fairlock:r:{" + name + "}"}).Slice()
	if err != nil || len(v) != 0 {
		t.Fatalf("state of a free lock = %v, %v; want []", v, err)
	}
}

func TestFunctionsOnRedis(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "single node", true: "cluster"}[cluster], func(t *testing.T) {
			var c redis.UniversalClient
			if cluster {
				c = redistest.Cluster(t)
			} else {
				c = redistest.Real(t)
			}
			rec := &commands{}
			c.AddHook(rec)
			ctx := context.Background()
			name := redistest.Name(t)
			// A library of its own (the sources differ by a comment), so that
			// deleting it below cannot disturb other tests on this server.
			src := lua.Sources()
			src["hold.lua"] += "\n-- script_test\n"
			s := lua.MustBuild(src)
			lib, _ := s.Library()
			if def, _ := lua.Default().Library(); def == lib {
				t.Fatal("the test's library has the default library's name")
			}

			state(t, s, c, name)
			// Loaded at first use unless an earlier test or process did.
			loaded := "fcall function fcall"
			if cluster {
				loaded = "fcall fcall"
			}
			if got := rec.take(); got != "fcall" && got != loaded {
				t.Fatalf("first call sent %q, want fcall (after loading the library if missing)", got)
			}
			state(t, s, c, name)
			if got := rec.take(); got != "fcall" {
				t.Fatalf("second call sent %q, want fcall", got)
			}

			// A server that lost its functions gets the library again.
			deleteLibrary := func(name string) error {
				if cc, ok := c.(*redis.ClusterClient); ok {
					return cc.ForEachMaster(ctx, func(ctx context.Context, rc *redis.Client) error {
						return rc.FunctionDelete(ctx, name).Err()
					})
				}
				return c.(*redis.Client).FunctionDelete(ctx, name).Err()
			}
			if err := deleteLibrary(lib); err != nil {
				t.Fatal(err)
			}
			rec.take()
			state(t, s, c, name)
			if got := rec.take(); got != loaded {
				t.Fatalf("call after the library was deleted sent %q, want %s", got, loaded)
			}

			// A set built from other sources is another library, side by side.
			src["state.lua"] = "-- a variant\n" + src["state.lua"]
			other := lua.MustBuild(src)
			if otherLib, _ := other.Library(); otherLib == lib {
				t.Fatalf("two different script sets share the library name %s", lib)
			}
			state(t, other, c, name)
			state(t, s, c, name)
			if got := rec.take(); got != loaded+" fcall" {
				t.Fatalf("calls of two sets sent %q, want the second library loaded beside the first", got)
			}
			otherLib, _ := other.Library()
			for _, name := range []string{lib, otherLib} {
				if err := deleteLibrary(name); err != nil {
					t.Fatalf("deleting the test's library %s: %v", name, err)
				}
			}
		})
	}
}

func TestScriptsWithoutFunctions(t *testing.T) {
	// miniredis has no Functions: the first call finds out, every later one
	// uses EVALSHA (EVAL when the script is not cached yet).
	_, _, c := redistest.Mini(t)
	rec := &commands{}
	c.AddHook(rec)
	s := lua.MustBuild(lua.Sources())
	state(t, s, c, redistest.Name(t))
	if got := rec.take(); got != "fcall evalsha eval" {
		t.Fatalf("first call sent %q, want fcall evalsha eval", got)
	}
	state(t, s, c, redistest.Name(t))
	if got := rec.take(); got != "evalsha" {
		t.Fatalf("second call sent %q, want evalsha", got)
	}
}

func TestFunctionsForbiddenByACL(t *testing.T) {
	admin := redistest.Real(t)
	ctx := context.Background()
	user := "fairlock-" + redistest.Name(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">fairlock-test", "~*", "&*", "+@all", "-fcall", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	opts := *admin.Options()
	opts.Username, opts.Password = user, "fairlock-test"
	c := redis.NewClient(&opts)
	t.Cleanup(func() { _ = c.Close() })
	rec := &commands{}
	c.AddHook(rec)
	s := lua.MustBuild(lua.Sources())
	state(t, s, c, redistest.Name(t))
	if got := rec.take(); !strings.HasPrefix(got, "fcall evalsha") {
		t.Fatalf("first call sent %q, want fcall (refused) then evalsha", got)
	}
	state(t, s, c, redistest.Name(t))
	if got := rec.take(); got != "evalsha" {
		t.Fatalf("second call sent %q, want evalsha", got)
	}
}

// A Call (a script bound to its keys, FCALL's fixed words boxed once) sends
// one FCALL per call once the client's mode is known, finds a deleted
// library again like Script.Run, and turns to EVALSHA without Functions.
func TestCallOnRedis(t *testing.T) {
	for _, kind := range []string{"single node", "cluster", "miniredis"} {
		t.Run(kind, func(t *testing.T) {
			var c redis.UniversalClient
			switch kind {
			case "cluster":
				c = redistest.Cluster(t)
			case "miniredis":
				_, _, c = redistest.Mini(t)
			default:
				c = redistest.Real(t)
			}
			rec := &commands{}
			c.AddHook(rec)
			ctx := context.Background()
			src := lua.Sources()
			src["hold.lua"] += "\n-- call_test\n"
			s := lua.MustBuild(src)
			lib, _ := s.Library()
			call := s.State.On([]string{"fairlock:r:{" + redistest.Name(t) + "}"})
			run := func() {
				t.Helper()
				v, err := call.Run(ctx, c, modeOf(c)).Slice()
				if err != nil || len(v) != 0 {
					t.Fatalf("state of a free lock = %v, %v; want []", v, err)
				}
			}
			run() // learns the mode
			rec.take()
			run()
			want := map[string]string{"miniredis": "evalsha"}[kind]
			if want == "" {
				want = "fcall"
			}
			if got := rec.take(); got != want {
				t.Fatalf("a call sent %q, want %s", got, want)
			}
			if kind == "miniredis" {
				return
			}
			t.Cleanup(func() { deleteLibrary(t, c, lib) })
			deleteLibrary(t, c, lib)
			rec.take()
			run()
			loaded := "fcall fcall function fcall" // the Call's, then Script.Run's
			if kind == "cluster" {
				loaded = "fcall fcall fcall" // FUNCTION LOAD goes through the node's client
			}
			if got := rec.take(); got != loaded {
				t.Fatalf("a call after the library was deleted sent %q, want %s", got, loaded)
			}
		})
	}
}

func deleteLibrary(t *testing.T, c redis.UniversalClient, name string) {
	t.Helper()
	ctx := context.Background()
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, rc *redis.Client) error {
			if err := rc.FunctionDelete(ctx, name).Err(); err != nil && !strings.Contains(err.Error(), "not exist") {
				return err
			}
			return nil
		})
	} else if err = c.(*redis.Client).FunctionDelete(ctx, name).Err(); err != nil && strings.Contains(err.Error(), "not exist") {
		err = nil
	}
	if err != nil {
		t.Fatalf("deleting library %s: %v", name, err)
	}
}

// The real server under test is the one the run asked for: redis-server,
// or valkey-server in .ci/run's Valkey pass (FAIRLOCK_SERVER_BIN), which
// must not quietly run against Redis.
func TestRealServerIsTheOneAskedFor(t *testing.T) {
	info, err := redistest.Real(t).Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	valkey := strings.Contains(info, "valkey_version:")
	version := "redis_version"
	if valkey {
		version = "valkey_version"
	}
	for _, l := range strings.Split(info, "\n") {
		if strings.HasPrefix(l, version+":") {
			t.Logf("server under test: %s", strings.TrimSpace(l))
		}
	}
	if want := strings.Contains(redistest.ServerBin(), "valkey"); want != valkey {
		t.Errorf("the server under test is valkey: %v, want %v (%s=%q)", valkey, want, redistest.ServerBinEnv, redistest.ServerBin())
	}
}
