package fairlockprom_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/extra/fairlockprom"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The demo (fairlock demo -metrics) serves the collector's measures under
// the same names and types, in a text Prometheus's own parser reads: it is
// scraped over HTTP while it runs.
func TestTheDemoServesTheSameMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the demo")
	}
	bin := filepath.Join(t.TempDir(), "fairlock")
	build := exec.Command("go", "build", "-o", bin, "./cmd/fairlock")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"demo", "-metrics", "127.0.0.1:0", "-jobs", "100000", "-interval", "1ms", "-hold", "2ms"}
	if addr := os.Getenv("FAIRLOCK_REDIS_ADDR"); addr != "" {
		args = append(args, "-redis", addr) // the real Redis CI starts; else the embedded miniredis
	}
	demo := exec.CommandContext(ctx, bin, args...)
	stdout, err := demo.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = demo.Process.Kill(); _ = demo.Wait() }()
	var url string
	lines := bufio.NewScanner(stdout)
	for url == "" && lines.Scan() {
		if m := regexp.MustCompile(`^metrics: (http://\S+/metrics)`).FindStringSubmatch(lines.Text()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		t.Fatal("the demo did not say where its metrics are")
	}
	go func() { // keep the pipe drained
		for lines.Scan() {
		}
	}()

	// The collector's families and their types.
	c, err := fairlockprom.New()
	if err != nil {
		t.Fatal(err)
	}
	descs := make(chan *prometheus.Desc, 20)
	c.Describe(descs)
	close(descs)
	want := map[string]bool{}
	for d := range descs {
		m := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())
		want[m[1]] = true
	}

	deadline := time.Now().Add(time.Minute)
	for {
		fams := scrape(t, url)
		for name := range fams {
			if !want[name] {
				t.Errorf("the demo serves %s, which the collector does not have", name)
			}
		}
		if t.Failed() {
			return
		}
		// (A family shows once it has a series: lost holds, failed
		// renewals and evictions may never have one in a healthy run.)
		types := map[string]dto.MetricType{
			"fairlock_acquire_duration_seconds": dto.MetricType_HISTOGRAM,
			"fairlock_hold_duration_seconds":    dto.MetricType_HISTOGRAM,
			"fairlock_acquisitions_total":       dto.MetricType_COUNTER,
			"fairlock_queue_length":             dto.MetricType_GAUGE,
		}
		for name, typ := range types {
			if f, ok := fams[name]; ok && f.GetType() != typ {
				t.Errorf("%s: type %v, want %v", name, f.GetType(), typ)
			}
		}
		// Served while it runs: the fair lock's acquisitions, with some
		// queued behind others and handed the lock.
		if value(fams["fairlock_acquisitions_total"], "primitive", "fair", "outcome", "acquired") >= 20 &&
			value(fams["fairlock_handoff_duration_seconds"], "primitive", "fair") >= 1 &&
			value(fams["fairlock_acquire_duration_seconds"], "primitive", "fair", "queued", "true") >= 1 &&
			value(fams["fairlock_hold_duration_seconds"], "primitive", "fair", "end", "released") >= 1 &&
			fams["fairlock_queue_length"] != nil {
			return
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for n, f := range fams {
				b.WriteString(n + " " + f.String() + "\n")
			}
			t.Fatalf("the demo's metrics never showed 20 fair acquisitions:\n%s", b.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
