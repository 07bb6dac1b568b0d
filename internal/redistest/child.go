package redistest

import (
	"io"
	"os"
	"os/exec"
	"testing"
)

// StartChild re-runs the test binary as another process, as a test that
// needs a client in a process of its own does (a waiter, a worker killed
// mid-hold): it runs the tests that match run, with env ("NAME=value")
// added to this process's environment, its stderr on this one's. It
// returns the process, its stdin and its stdout; the test reads what the
// child says from stdout and ends it by closing stdin or killing it.
func StartChild(t testing.TB, run, env string) (*exec.Cmd, io.WriteCloser, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin, stdout
}
