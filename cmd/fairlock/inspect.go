package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/redis/go-redis/v9"
)

func inspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var at target
	at.register(fs)
	kind := fs.String("kind", "auto", "what NAME is: auto (find it), fair (a fair.Mutex), reentrant, semaphore, rw (a fair.RWMutex) or election (a fair.Election)")
	watch := fs.Duration("watch", 0, "refresh every `interval` (1s, say) in place, until interrupted")
	asJSON := fs.Bool("json", false, "print JSON, for scripts (with -watch, one object per line)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: fairlock inspect [-redis URL|-cluster ...|-sentinel ...] [-kind K] [-watch D] [-json] NAME\n\n"+
			"Prints who holds the lock NAME and who waits for it, in order, with what each asks\n"+
			"for (for an election: its leader, term and value, and its candidates in the order\n"+
			"they will lead); it finds what kind of lock NAME is. The Redis URL may also come\n"+
			"from $"+envURL+".")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := at.require(fs); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("inspect needs exactly one lock name, got %d", fs.NArg())
	}
	name := fs.Arg(0)
	if err := core.CheckName(name); err != nil {
		return err
	}
	if *kind == "mutex" {
		*kind = kindFair // the name it had before auto
	}
	if *kind != "auto" && !slices.Contains(kinds, *kind) {
		return fmt.Errorf("-kind must be auto, %s, got %q", strings.Join(kinds, ", "), *kind)
	}
	if *watch < 0 || (*watch > 0 && *watch < 100*time.Millisecond) {
		return fmt.Errorf("-watch must be at least 100ms, got %v", *watch)
	}
	client := at.client()
	defer func() { _ = client.Close() }()

	live := isTerminal(stdout) && !*asJSON
	for {
		var buf bytes.Buffer
		err := inspectOnce(ctx, client, name, *kind, *asJSON, &buf)
		if *watch == 0 {
			_, _ = stdout.Write(buf.Bytes())
			return err
		}
		switch {
		case ctx.Err() != nil:
			return nil // interrupted: the way a watch ends
		case err != nil && !errors.Is(err, errNoSuchLock):
			return err
		case err != nil && *asJSON:
			buf.Reset()
			_ = json.NewEncoder(&buf).Encode(map[string]string{"name": name, "error": err.Error()})
		case err != nil:
			fmt.Fprintf(&buf, "%s\n", err)
		}
		if live {
			// Redraw in place: home the cursor, clear the screen.
			fmt.Fprintf(stdout, "\x1b[H\x1b[2J%s\n(every %v; Ctrl-C to stop)\n", buf.Bytes(), *watch)
		} else {
			_, _ = stdout.Write(buf.Bytes())
			if !*asJSON {
				fmt.Fprintln(stdout)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*watch):
		}
	}
}

// inspectOnce reads the lock (every kind with that name, for auto) and
// writes it to w.
func inspectOnce(ctx context.Context, client redis.UniversalClient, name, kind string, asJSON bool, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	found, err := kindsOf(ctx, client, name)
	if err != nil {
		return err
	}
	if kind != "auto" {
		if !slices.Contains(found, kind) {
			return fmt.Errorf("%w: no %s %q has keys in Redis (a lock unused for a while has none)", errNoSuchLock, what(kind), name)
		}
		found = []string{kind}
	}
	if len(found) == 0 {
		return fmt.Errorf("%w: no fair lock, reentrant lock, semaphore, read-write lock or election %q has keys in Redis (a lock unused for a while has none)", errNoSuchLock, name)
	}
	for i, k := range found {
		v, err := load(ctx, client, k, name)
		if err != nil {
			return err
		}
		if asJSON {
			if err := json.NewEncoder(w).Encode(v); err != nil {
				return err
			}
			continue
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		printView(w, v)
	}
	return nil
}

// printView prints a lock's holders and queue as tables.
func printView(w io.Writer, v view) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	switch v.Kind {
	case kindSemaphore:
		fmt.Fprintf(w, "semaphore %q: %d of %d permits in use\n\n", v.Name, v.InUse, v.Permits)
	case kindRW:
		state := "free"
		if n := len(v.Holders); n > 0 && v.Holders[0].Mode == "write" {
			state = "held by a writer"
		} else if n > 0 {
			state = fmt.Sprintf("held by %d reader(s)", n)
		}
		fmt.Fprintf(w, "read-write lock %q: %s\n\n", v.Name, state)
	case kindElection:
		fmt.Fprintf(w, "election %q\n\n", v.Name)
	default:
		fmt.Fprintf(w, "%s %q\n\n", what(v.Kind), v.Name)
	}
	if len(v.Holders) == 0 && v.Kind == kindElection {
		fmt.Fprintln(w, "leader: none")
	} else if len(v.Holders) == 0 {
		fmt.Fprintln(w, "holder: none (free)")
	} else {
		switch v.Kind {
		case kindSemaphore:
			fmt.Fprintln(tw, "HOLDER\tLABEL\tHOST\tPID\tPERMITS\tTTL\tTOKEN")
		case kindRW:
			fmt.Fprintln(tw, "HOLDER\tLABEL\tHOST\tPID\tMODE\tTTL\tTOKEN")
		case kindReentrant:
			fmt.Fprintln(tw, "HOLDER\tLABEL\tHOST\tPID\tCOUNT\tTTL\tTOKEN")
		case kindElection:
			fmt.Fprintln(tw, "LEADER\tLABEL\tHOST\tPID\tTERM\tSINCE\tTTL\tVALUE")
		default:
			fmt.Fprintln(tw, "HOLDER\tLABEL\tHOST\tPID\tCOUNT\tTTL\tTOKEN\tCLAIMED")
		}
		for _, h := range v.Holders {
			ttl := time.Duration(h.TTLMs) * time.Millisecond
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t", h.Owner, orDash(h.Label), orDash(h.Host), pid(h.PID))
			switch v.Kind {
			case kindSemaphore:
				fmt.Fprintf(tw, "%d\t%v\t%d\n", h.Permits, ttl, h.Token)
			case kindRW:
				fmt.Fprintf(tw, "%s\t%v\t%d\n", h.Mode, ttl, h.Token)
			case kindReentrant:
				fmt.Fprintf(tw, "%d\t%v\t%d\n", h.Count, ttl, h.Token)
			case kindElection:
				fmt.Fprintf(tw, "%d\t%s\t%v\t%q\n", h.Token, time.UnixMilli(h.SinceMs).UTC().Format(time.RFC3339Nano), ttl, h.Value)
			default:
				fmt.Fprintf(tw, "%d\t%v\t%d\t%v\n", h.Count, ttl, h.Token, !h.Pending)
			}
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w)
	if len(v.Queue) == 0 && v.Kind == kindElection {
		fmt.Fprintln(w, "candidates: none")
		return
	}
	if len(v.Queue) == 0 {
		fmt.Fprintln(w, "queue: empty")
		return
	}
	if v.Kind == kindElection {
		fmt.Fprintln(w, "candidates, in the order they will lead:")
	}
	if v.Kind == kindReentrant {
		fmt.Fprintln(w, "waiters, woken one per release in this order (not a queue: any caller may take a free lock):")
	}
	asks := map[string]string{kindSemaphore: "\tASKS", kindRW: "\tASKS", kindElection: "\tVALUE"}[v.Kind]
	fmt.Fprintf(tw, "#\tWAITER\tLABEL\tHOST\tPID%s\tDEADLINE\tSTATE\n", asks)
	for i, q := range v.Queue {
		state := "waiting"
		if q.Expired {
			state = "expired (evicted at the next call)"
		}
		ask := ""
		switch v.Kind {
		case kindSemaphore:
			ask = fmt.Sprintf("\t%d permit(s)", q.Permits)
		case kindRW:
			ask = "\t" + q.Mode
		case kindElection:
			ask = fmt.Sprintf("\t%q", q.Value)
		}
		waiter := q.Entry
		if waiter == "" {
			waiter = q.Owner // a semaphore's first waiter, holding its gate
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s%s\t%v\t%s\n", i+1, waiter, orDash(q.Label), orDash(q.Host), pid(q.PID), ask,
			time.Duration(q.DeadlineMs)*time.Millisecond, state)
	}
	_ = tw.Flush()
}

func pid(p int) string {
	if p == 0 {
		return "-"
	}
	return fmt.Sprint(p)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return printable(s)
}

// printable is text for a table cell: a label may hold anything, and a tab,
// a newline or a terminal's escape would break the table or reach the
// operator's terminal, so text with control characters is shown quoted, as
// Go writes a string ("a\tb"); -json gives it as it is.
func printable(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	return strconv.Quote(s)
}
