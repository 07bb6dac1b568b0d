// Command fairlock demonstrates and inspects fairlock's locks.
//
//	fairlock demo [-redis host:port] [-workers N] [-jobs N] [-hold D] [-interval D] [-permits K]
//	fairlock inspect -redis host:port [-kind mutex|semaphore|rw] NAME
//
// demo runs workers, each a separate handle on a client of its own (as if on
// separate machines), that submit jobs which must run one at a time in
// submission order: first with the fair lock, then with the reentrant lock,
// and reports jobs served, order violations and waits side by side. Without
// -redis it starts an embedded miniredis whose clock follows real time. With
// -permits K above 1, up to K jobs run at once, started in submission order,
// under a fair semaphore.
//
// inspect prints the holders and queue of a live fair lock, fair semaphore
// (-kind semaphore) or fair read-write lock (-kind rw).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

const usage = `fairlock: distributed locks on Redis, demonstrated and inspected.

Usage:
  fairlock demo [flags]            run jobs under the fair and the reentrant lock, compare
  fairlock inspect -redis ADDR NAME  print the holders and queue of a fair lock (-kind: semaphore, rw)

Run "fairlock demo -h" or "fairlock inspect -h" for their flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h of a subcommand: its usage was asked for, and printed
		}
		fmt.Fprintln(os.Stderr, "fairlock:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command: demo or inspect")
	}
	switch args[0] {
	case "demo":
		return demo(ctx, args[1:], stdout, stderr)
	case "inspect":
		return inspect(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q: want demo or inspect", args[0])
	}
}
