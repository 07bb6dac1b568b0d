package core

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// CheckClient rejects clients that cannot keep a lock safe.
func CheckClient(c redis.UniversalClient) error {
	switch v := c.(type) {
	case nil:
		return Invalid("client must not be nil")
	case *redis.Client:
		if v == nil {
			return Invalid("client must not be nil")
		}
	case *redis.ClusterClient:
		if v == nil {
			return Invalid("client must not be nil")
		}
	case *redis.Ring:
		return Invalid("*redis.Ring is not supported: it moves keys between shards when one is marked down, which would let two clients hold one lock")
	}
	return nil
}

// CheckName rejects names that would break the keys' hash tag, and names
// longer than MaxNameLen.
func CheckName(name string) error {
	if name == "" {
		return Invalid("lock name must not be empty")
	}
	if len(name) > MaxNameLen {
		return Invalid("lock name is %d bytes, at most %d: every key and channel of the lock carries it (hash a longer one)", len(name), MaxNameLen)
	}
	if strings.ContainsAny(name, "{}") {
		return Invalid("lock name %q must not contain { or }: it is put inside the keys' hash tag", name)
	}
	return nil
}

// MaxNameLen bounds a lock's name, in bytes: every key and channel of a
// lock carries it, each script call sends its keys, and Redis's own advice
// is against keys of a kilobyte.
const MaxNameLen = 1024
