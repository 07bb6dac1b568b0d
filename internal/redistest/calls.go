package redistest

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// Calls reports whether a command's arguments call s: FCALL of its
// function, or EVALSHA or EVAL of its text. For tests that watch what goes
// over the wire (a hook on the client).
func Calls(s *transport.Script, args []any) bool {
	if len(args) < 2 {
		return false
	}
	name, _ := args[0].(string)
	switch strings.ToLower(name) {
	case "fcall":
		return args[1] == s.Function()
	case "evalsha":
		return args[1] == evalOf(s).sha
	case "eval":
		return args[1] == evalOf(s).src
	}
	return false
}

// evalWords are what an EVALSHA and an EVAL of a script send as the
// script: its SHA1 and its text.
type evalWords struct{ sha, src string }

var evals sync.Map // *transport.Script -> evalWords

// evalOf learns s's EVAL words the way a server would see them: it runs s
// on a client that reaches no server, whose hook answers the EVALSHA with
// NOSCRIPT, so that the script sends its text with EVAL, and records both.
// Only the library knows the text (its helpers are trimmed to what the
// script calls); this reads it from the library's own calls.
func evalOf(s *transport.Script) evalWords {
	if w, ok := evals.Load(s); ok {
		return w.(evalWords)
	}
	var w evalWords
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer func() { _ = c.Close() }()
	c.AddHook(answer(func(cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 2 {
			return errNoServer
		}
		switch name, _ := args[0].(string); strings.ToLower(name) {
		case "evalsha":
			w.sha, _ = args[1].(string)
			return noScript{}
		case "eval":
			w.src, _ = args[1].(string)
		}
		return errNoServer
	}))
	_ = s.Run(context.Background(), c, nil, []string{"{calls}"}).Err() // a nil Mode: EVALSHA
	if w.sha == "" || w.src == "" {
		panic("redistest: a script's run sent no EVALSHA and EVAL")
	}
	v, _ := evals.LoadOrStore(s, w)
	return v.(evalWords)
}

var errNoServer = errors.New("redistest: no server (learning a script's EVAL words)")

// noScript is the server's NOSCRIPT reply, a redis.Error.
type noScript struct{}

func (noScript) Error() string { return "NOSCRIPT No matching script." }
func (noScript) RedisError()   {}

// answer is a hook that answers every command with fn's error, sending
// none.
type answer func(cmd redis.Cmder) error

func (a answer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (a answer) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		err := a(cmd)
		cmd.SetErr(err)
		return err
	}
}

func (a answer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
