package redistest

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// ScriptCounter is a go-redis hook that counts script calls (EVAL, EVALSHA
// and their read-only forms) and PUBLISH commands made through a client.
type ScriptCounter struct {
	Scripts atomic.Int64
}

// DialHook passes through.
func (c *ScriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts scripts.
func (c *ScriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.HasPrefix(strings.ToLower(cmd.Name()), "eval") {
			c.Scripts.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts scripts in pipelines.
func (c *ScriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if strings.HasPrefix(strings.ToLower(cmd.Name()), "eval") {
				c.Scripts.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}
