package fairlock_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The options every lock takes are fairlock's; a primitive takes only the
// options that apply to it (fair.WithLabel the fair ones, WithReplicas the
// mutexes): an option given where it cannot apply is a compile error, not
// a run-time one. The compiler itself judges small
// programs (go build, with an overlay that puts each program in a package of
// this module for the build only).
func TestMisappliedOptionsDoNotCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs with the go command")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to judge the programs: %v", err)
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	build := func(t *testing.T, body string) (string, error) {
		t.Helper()
		dir := t.TempDir()
		src := filepath.Join(dir, "misuse.go")
		text := `package misuse

import (
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/multi"
	"github.com/fairlock/fairlock/reentrant"
)

var (
	_ = time.Second
	_ = fair.New
	_ = reentrant.New
	_ = multi.NewRedLock
)

func use(o *fairlock.Owner) {
` + body + `
}
`
		if err := os.WriteFile(src, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{
			filepath.Join(root, "internal", "misuse", "misuse.go"): src,
		}})
		ov := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(ov, overlay, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(goCmd, "build", "-overlay", ov, "./internal/misuse")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// The harness compiles what is right: every option where it applies.
	out, err := build(t, `
	_, _ = fair.New(o, "a", fairlock.WithLease(time.Second), fairlock.WithWaitTimeout(time.Second), fairlock.WithReplicas(1, time.Second))
	_, _ = fair.NewSemaphore(o, "a", 2, fairlock.WithLease(time.Second), fair.WithLabel("x"))
	_, _ = fair.NewRWMutex(o, "a", fairlock.WithWaitTimeout(time.Second))
	opts := []fair.Option{fairlock.WithLease(time.Second)}
	_, _ = fair.NewSemaphore(o, "a", 2, opts...)
	mutexOpts := []fair.MutexOption{fairlock.WithLease(time.Second), fairlock.WithReplicas(1, time.Second)}
	_, _ = fair.New(o, "a", mutexOpts...)
	_, _ = reentrant.New(o, "a", fairlock.WithLease(time.Second), fairlock.WithReplicas(1, time.Second), fairlock.WithWaitTimeout(time.Second))
	_, _ = multi.NewRedLock([]*fairlock.Owner{o}, "a", fairlock.WithLease(time.Second))`)
	if err != nil {
		t.Fatalf("a program that uses every option where it applies does not build: %v\n%s", err, out)
	}

	for _, c := range []struct{ what, body, want string }{
		{"the fair lock's label on RedLock",
			`_, _ = multi.NewRedLock([]*fairlock.Owner{o}, "a", fair.WithLabel("x"))`,
			"does not implement reentrant.Option"},
		{"the fair lock's label on the reentrant lock",
			`_, _ = reentrant.New(o, "a", fair.WithLabel("x"))`,
			"does not implement reentrant.Option"},
		{"a zero option's kind where it cannot apply",
			`_, _ = fair.NewRWMutex(o, "a", fairlock.MutexOption{})`,
			"does not implement fair.Option"},
		{"WithReplicas on the semaphore",
			`_, _ = fair.NewSemaphore(o, "a", 2, fairlock.WithReplicas(1, time.Second))`,
			"does not implement fair.Option"},
		{"WithReplicas on the RW lock",
			`_, _ = fair.NewRWMutex(o, "a", fairlock.WithReplicas(1, time.Second))`,
			"does not implement fair.Option"},
	} {
		t.Run(c.what, func(t *testing.T) {
			out, err := build(t, c.body)
			if err == nil {
				t.Fatalf("builds, want a compile error:\n%s", c.body)
			}
			if !strings.Contains(out, c.want) {
				t.Fatalf("fails for another reason than %q:\n%s", c.want, out)
			}
		})
	}
}
