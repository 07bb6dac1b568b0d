package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

func ls(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var at target
	at.register(fs)
	match := fs.String("match", "*", "list only the locks whose name matches this glob `pattern` (path.Match: *, ?, [a-z])")
	asJSON := fs.Bool("json", false, "print JSON, one object per lock per line, for scripts")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: fairlock ls [-redis URL|-cluster ...|-sentinel ...] [-match PATTERN] [-json]\n\n"+
			"Lists the live locks of every kind (fair, reentrant, semaphore, rw) and the\n"+
			"elections, with their holder (an election's leader, term and value), queue\n"+
			"length (candidates) and lease left. On a cluster it scans every master. The\n"+
			"Redis URL may also come from $"+envURL+".")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return fmt.Errorf("ls takes no arguments, got %q", fs.Args())
	}
	if _, err := path.Match(*match, ""); err != nil {
		return fmt.Errorf("-match %q: %w", *match, err)
	}
	if err := at.require(fs); err != nil {
		return err
	}
	client := at.client()
	defer func() { _ = client.Close() }()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	locks, err := scanLocks(ctx, client, *match)
	if err != nil {
		return err
	}
	// A lock that cannot be read (one of another data layout, during an
	// upgrade) is listed with its error, and the others still are; the
	// command then fails, so that a script sees it.
	var views []view
	var failed error
	unreadable := 0
	for _, l := range locks {
		v, err := load(ctx, client, l.kind, l.name)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			if unreadable++; unreadable == 1 {
				failed = err
			}
			v = view{Kind: l.kind, Name: l.name, Error: err.Error()}
		}
		views = append(views, v)
	}
	if unreadable > 1 {
		failed = fmt.Errorf("%w (and %d more of the %d locks listed)", failed, unreadable-1, len(views))
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, v := range views {
			if err := enc.Encode(v); err != nil {
				return err
			}
		}
		return failed
	}
	if len(views) == 0 {
		fmt.Fprintln(stdout, "no locks")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tHOLDER\tQUEUE\tTTL")
	for _, v := range views {
		queue := fmt.Sprint(len(v.Queue))
		ttl := "-"
		if d := v.ttl(); d > 0 {
			ttl = d.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.Kind, printable(v.Name), v.holderSummary(), queue, ttl)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return failed
}

// lockID is one lock: a kind and a name.
type lockID struct{ kind, name string }

// scanLocks finds the locks with keys in Redis whose name matches the glob
// match, by SCAN over every master (a cluster's each), sorted by name.
func scanLocks(ctx context.Context, client redis.UniversalClient, match string) ([]lockID, error) {
	var (
		mu    sync.Mutex
		found = map[lockID]bool{}
	)
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		it := c.Scan(ctx, 0, "fairlock:*", 1000).Iterator()
		for it.Next(ctx) {
			id, ok := parseKey(it.Val())
			if !ok {
				continue
			}
			if m, _ := path.Match(match, id.name); !m {
				continue
			}
			mu.Lock()
			found[id] = true
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	if cc, ok := client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, client)
	}
	if err != nil {
		return nil, fmt.Errorf("scanning for locks: %w", err)
	}
	out := make([]lockID, 0, len(found))
	for id := range found {
		out = append(out, id)
	}
	slices.SortFunc(out, func(a, b lockID) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return strings.Compare(a.kind, b.kind)
	})
	return out, nil
}

// parseKey reads the kind and name of one of fairlock's keys,
// "fairlock:<f|r|s|rw|e>:{name}[...]".
func parseKey(key string) (lockID, bool) {
	rest, ok := strings.CutPrefix(key, "fairlock:")
	if !ok {
		return lockID{}, false
	}
	tag, rest, ok := strings.Cut(rest, ":{")
	if !ok {
		return lockID{}, false
	}
	name, _, ok := strings.Cut(rest, "}")
	if !ok || name == "" {
		return lockID{}, false
	}
	kind := map[string]string{"f": kindFair, "r": kindReentrant, "s": kindSemaphore, "rw": kindRW, "e": kindElection}[tag]
	if kind == "" {
		return lockID{}, false
	}
	return lockID{kind, name}, true
}
