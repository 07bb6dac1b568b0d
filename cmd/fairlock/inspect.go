package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/fairlock/fairlock/fair"
)

func inspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var at target
	at.register(fs)
	kind := fs.String("kind", "mutex", "what NAME is: mutex (a fair.Mutex), semaphore (a fair.Semaphore) or rw (a fair.RWMutex)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: fairlock inspect -redis host:port|-cluster host:port,...|-sentinel host:port,... -master NAME\n"+
			"                       [-kind mutex|semaphore|rw] NAME\n\n"+
			"Prints the holders and the queue of the fair lock, semaphore or read-write lock NAME.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	given, err := at.given()
	if err != nil {
		return err
	}
	if !given {
		fs.Usage()
		return errors.New("inspect needs -redis, -cluster or -sentinel")
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("inspect needs exactly one lock name, got %d", fs.NArg())
	}
	switch *kind {
	case "mutex", "semaphore", "rw":
	default:
		return fmt.Errorf("-kind must be mutex, semaphore or rw, got %q", *kind)
	}
	client := at.client()
	defer func() { _ = client.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	name := fs.Arg(0)
	if *kind != "mutex" {
		inspect, what := fair.InspectSemaphore, "semaphore"
		if *kind == "rw" {
			inspect, what = fair.InspectRWMutex, "read-write lock"
		}
		st, err := inspect(ctx, client, name)
		if err != nil {
			return err
		}
		printPermits(stdout, what, name, st)
		return nil
	}
	st, err := fair.Inspect(ctx, client, name)
	if err != nil {
		return err
	}
	printState(stdout, name, st)
	return nil
}

// printPermits prints a semaphore's (or read-write lock's) holds and queue.
func printPermits(w io.Writer, what, name string, st fair.SemaphoreState) {
	fmt.Fprintf(w, "%s %q: %d of %d permits in use\n\n", what, name, st.InUse, st.Permits)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(st.Holders) == 0 {
		fmt.Fprintln(w, "holders: none")
	} else {
		fmt.Fprintln(tw, "HOLDER\tLABEL\tHOST\tPID\tPERMITS\tTTL\tTOKEN")
		for _, h := range st.Holders {
			permits := fmt.Sprint(h.Permits)
			if what == "read-write lock" {
				permits = "read"
				if h.Permits == fair.MaxPermits {
					permits = "write"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%v\t%d\n", h.Owner, orDash(h.Label), h.Host, h.PID, permits, h.TTL, h.Token)
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w)
	printQueue(w, tw, st.Queue)
}

func printState(w io.Writer, name string, st fair.State) {
	fmt.Fprintf(w, "fair lock %q\n\n", name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if h := st.Holder; h == nil {
		fmt.Fprintln(w, "holder: none (free)")
	} else {
		fmt.Fprintln(tw, "HOLDER\tLABEL\tHOST\tPID\tCOUNT\tTTL\tTOKEN\tCLAIMED")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%v\t%d\t%v\n", h.Owner, orDash(h.Label), h.Host, h.PID, h.Count, h.TTL, h.Token, !h.Pending)
		_ = tw.Flush()
	}
	fmt.Fprintln(w)
	printQueue(w, tw, st.Queue)
}

func printQueue(w io.Writer, tw *tabwriter.Writer, queue []fair.Waiter) {
	if len(queue) == 0 {
		fmt.Fprintln(w, "queue: empty")
		return
	}
	fmt.Fprintln(tw, "#\tWAITER\tLABEL\tHOST\tPID\tDEADLINE\tSTATE")
	for i, q := range queue {
		state := "waiting"
		if q.Expired {
			state = "expired (evicted at the next call)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%v\t%s\n", i+1, q.Entry, orDash(q.Label), q.Host, q.PID, q.Deadline, state)
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
