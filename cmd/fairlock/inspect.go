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
	"github.com/redis/go-redis/v9"
)

func inspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("redis", "", "Redis address, host:port (required)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: fairlock inspect -redis host:port NAME\n\nPrints the holder and the queue of the fair lock NAME.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" {
		fs.Usage()
		return errors.New("inspect needs -redis host:port")
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("inspect needs exactly one lock name, got %d", fs.NArg())
	}
	client := redis.NewClient(&redis.Options{Addr: *addr})
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := fair.Inspect(ctx, client, fs.Arg(0))
	if err != nil {
		return err
	}
	printState(stdout, fs.Arg(0), st)
	return nil
}

func printState(w io.Writer, name string, st fair.State) {
	fmt.Fprintf(w, "fair lock %q\n\n", name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if h := st.Holder; h == nil {
		fmt.Fprintln(w, "holder: none (free)")
	} else {
		fmt.Fprintln(tw, "HOLDER\tLABEL\tHOST\tPID\tCOUNT\tTTL\tTOKEN\tCLAIMED")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%v\t%d\t%v\n", h.Owner, orDash(h.Label), h.Host, h.PID, h.Count, h.TTL, h.Token, !h.Pending)
		tw.Flush()
	}
	fmt.Fprintln(w)
	if len(st.Queue) == 0 {
		fmt.Fprintln(w, "queue: empty")
		return
	}
	fmt.Fprintln(tw, "#\tWAITER\tLABEL\tHOST\tPID\tDEADLINE\tSTATE")
	for i, q := range st.Queue {
		state := "waiting"
		if q.Expired {
			state = "expired (evicted at the next call)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%v\t%s\n", i+1, q.Entry, orDash(q.Label), q.Host, q.PID, q.Deadline, state)
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
