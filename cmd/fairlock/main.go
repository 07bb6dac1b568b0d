// Command fairlock demonstrates and inspects fairlock's locks.
//
//	fairlock demo [-redis URL] [-workers N] [-jobs N] [-hold D] [-interval D] [-permits K] [-metrics host:port]
//	fairlock ls -redis URL [-match PATTERN] [-json]
//	fairlock inspect -redis URL [-kind auto|fair|reentrant|semaphore|rw] [-watch D] [-json] NAME
//
// Every command finds Redis by -redis (host:port, or a URL
// redis://user:password@host:port/db, rediss:// for TLS), -cluster or
// -sentinel (addresses, or a URL), or else $FAIRLOCK_REDIS_URL.
//
// demo runs workers, each a separate handle on a client of its own (as if on
// separate machines), that submit jobs which must run one at a time in
// submission order: first with the fair lock, then with the reentrant lock,
// and reports jobs served, order violations and waits side by side. Without
// -redis it starts an embedded miniredis whose clock follows real time. With
// -permits K above 1, up to K jobs run at once, started in submission order,
// under a fair semaphore.
//
// With -metrics it serves Prometheus metrics of its locks while it runs.
//
// ls lists the live locks of every kind, with holder, queue length and
// lease left; on a cluster it scans every master.
//
// inspect prints who holds a lock and who waits for it, with what each
// asks for; it finds the lock's kind itself, refreshes in place with
// -watch, and prints JSON with -json.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
)

const usage = `fairlock: distributed locks on Redis, demonstrated and inspected.

Usage:
  fairlock demo [flags]              run jobs under the fair and the reentrant lock, compare
  fairlock ls -redis URL             list the live locks, with holder, queue length and TTL
  fairlock inspect -redis URL NAME   print who holds the lock NAME and who waits, in order

-redis takes host:port or redis://[user:password@]host:port[/db] (rediss:// for
TLS); -cluster and -sentinel name the other deployments; $FAIRLOCK_REDIS_URL
is used when none is given. Run "fairlock COMMAND -h" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h of a subcommand: its usage was asked for, and printed
		}
		fmt.Fprintln(os.Stderr, errorLine(err))
		os.Exit(2)
	}
}

// errorLine is how the command prints err: after "fairlock: ", once, though
// the library's errors begin with it too.
func errorLine(err error) string {
	return "fairlock: " + strings.TrimPrefix(err.Error(), "fairlock: ")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command: demo, ls or inspect")
	}
	switch args[0] {
	case "demo":
		return demo(ctx, args[1:], stdout, stderr)
	case "inspect":
		return inspect(ctx, args[1:], stdout, stderr)
	case "ls":
		return ls(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q: want demo, ls or inspect", args[0])
	}
}
