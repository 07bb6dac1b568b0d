package redistest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/redis/go-redis/v9"
)

// owners are the tests' owners, one per client and rig, as a process
// would keep one per client: Owner makes them, NoLeaks and CloseOwners
// close them. A test-only registry: the library
// has none.
var owners = struct {
	sync.Mutex
	m    map[ownerKey]*fairlock.Owner
	more []*fairlock.Owner // NewOwner's
}{m: map[ownerKey]*fairlock.Owner{}}

type ownerKey struct {
	client  redis.UniversalClient
	clk     clock.Clock
	scripts *lua.Scripts
}

// Owner returns the owner of client's handles in tests, made at the first
// call: every handle a test makes on one client shares it, as handles made
// on one owner do. A client NewOwner refuses (nil, say) gets nil, which
// the constructors refuse in turn.
func Owner(client redis.UniversalClient) *fairlock.Owner {
	return OwnerOn(client, nil, nil)
}

// OwnerOn is Owner for handles whose timers run on clk and that run
// scripts (nil: the real clock, the library's scripts): one owner per
// client, clock and scripts.
func OwnerOn(client redis.UniversalClient, clk clock.Clock, scripts *lua.Scripts) *fairlock.Owner {
	owners.Lock()
	defer owners.Unlock()
	k := ownerKey{client, clk, scripts}
	o := owners.m[k]
	if o == nil {
		var err error
		if o, err = newOwner(client, clk, scripts); err != nil {
			return nil
		}
		owners.m[k] = o
	}
	return o
}

// NewOwner returns a new owner of client, as fairlock.NewOwner does, whose
// timers run on clk (nil: the real clock), and that the tests' probe
// watches (Asleep, Unread, Background, SyncHubs): a test that makes and
// closes owners of its own makes them here. CloseOwners closes it too, if
// the test did not.
func NewOwner(client redis.UniversalClient, clk clock.Clock) (*fairlock.Owner, error) {
	o, err := newOwner(client, clk, nil)
	if err != nil {
		return nil, err
	}
	owners.Lock()
	owners.more = append(owners.more, o)
	owners.Unlock()
	return o, nil
}

// PresentOwner is NewOwner for an owner made as fairlock.WithPresence
// makes it, running scripts (nil: the library's).
func PresentOwner(client redis.UniversalClient, clk clock.Clock, scripts *lua.Scripts) (*fairlock.Owner, error) {
	o, err := core.NewOwnerWith(client, core.Rig{Clock: clk, Scripts: scripts, Probe: theProbe, Presence: true})
	if err != nil {
		return nil, err
	}
	owners.Lock()
	owners.more = append(owners.more, Public(o))
	owners.Unlock()
	return Public(o), nil
}

// PresenceConfirmed is core.PresenceConfirmed of owner: its presence is up
// and covers every hold a waiter may end.
func PresenceConfirmed(owner *fairlock.Owner) bool {
	return core.PresenceConfirmed(core.OwnerOf(owner))
}

// newOwner makes an owner with the tests' probe installed.
func newOwner(client redis.UniversalClient, clk clock.Clock, scripts *lua.Scripts) (*fairlock.Owner, error) {
	o, err := core.NewOwnerWith(client, core.Rig{Clock: clk, Scripts: scripts, Probe: theProbe, RestartCheck: -1})
	if err != nil {
		return nil, err
	}
	return Public(o), nil
}

// Public returns the *fairlock.Owner of o, an owner a test made with
// core.NewOwnerWith, for the constructors.
func Public(o *core.Owner) *fairlock.Owner {
	return core.PublicOwner(o).(*fairlock.Owner)
}

// CloseOwners closes every owner Owner made (their clients may be closed
// already: a release that fails then is not reported) and forgets them.
func CloseOwners() {
	owners.Lock()
	all := owners.more
	for _, o := range owners.m {
		all = append(all, o)
	}
	owners.m, owners.more = map[ownerKey]*fairlock.Owner{}, nil
	owners.Unlock()
	for _, o := range all {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = o.Close(ctx)
		cancel()
	}
	theProbe.presences.Clear() // what it heard of them
}

// Owners returns the OwnerOn of each client with clk; nil for a nil one.
func Owners(clients []redis.UniversalClient, clk clock.Clock) []*fairlock.Owner {
	out := make([]*fairlock.Owner, len(clients))
	for i, c := range clients {
		if c != nil {
			out[i] = OwnerOn(c, clk, nil)
		}
	}
	return out
}

// LoadedLibrary returns the name and code of the scripts' function library
// as a server has it loaded (FUNCTION LIST): a test or benchmark that
// deletes it and loads it again makes sure a call loaded it first.
func LoadedLibrary(ctx context.Context, c *redis.Client) (name, code string, err error) {
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "fairlock_*", WithCode: true}).Result()
	if err != nil {
		return "", "", err
	}
	fn := lua.Default().FairAcquire.Function()
	for _, l := range libs {
		for _, f := range l.Functions {
			if f.Name == fn {
				return l.Name, l.Code, nil
			}
		}
	}
	return "", "", fmt.Errorf("redistest: the server has no library with %s", fn)
}
