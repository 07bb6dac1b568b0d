package redistest

import (
	"context"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/redis/go-redis/v9"
)

// owners are the tests' owners, one per client, as a process would keep
// one per client: Owner makes them, SyncHubs reads their hubs, NoLeaks and
// CloseOwners close them. A test-only registry: the library has none.
var owners = struct {
	sync.Mutex
	m map[redis.UniversalClient]*core.Owner
}{m: map[redis.UniversalClient]*core.Owner{}}

// Owner returns the owner of client's handles in tests, made at the first
// call: every handle a test makes on one client shares it, as handles made
// on one owner do. A client NewOwner refuses (nil, say) gets nil, which
// the constructors refuse in turn.
func Owner(client redis.UniversalClient) *core.Owner {
	owners.Lock()
	defer owners.Unlock()
	o := owners.m[client]
	if o == nil {
		var err error
		if o, err = core.NewOwner(client); err != nil {
			return nil
		}
		owners.m[client] = o
	}
	return o
}

// allOwners returns every owner Owner made and CloseOwners has not closed.
func allOwners() []*core.Owner {
	owners.Lock()
	defer owners.Unlock()
	out := make([]*core.Owner, 0, len(owners.m))
	for _, o := range owners.m {
		out = append(out, o)
	}
	return out
}

// CloseOwners closes every owner Owner made (their clients may be closed
// already: a release that fails then is not reported) and forgets them.
func CloseOwners() {
	owners.Lock()
	all := owners.m
	owners.m = map[redis.UniversalClient]*core.Owner{}
	owners.Unlock()
	for _, o := range all {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = o.Close(ctx)
		cancel()
	}
}

// Owners returns the Owner of each client; nil for a nil one.
func Owners(clients []redis.UniversalClient) []*core.Owner {
	out := make([]*core.Owner, len(clients))
	for i, c := range clients {
		if c != nil {
			out[i] = Owner(c)
		}
	}
	return out
}
