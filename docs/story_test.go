package docs_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var update = flag.Bool("update", false, "rewrite queue-semantics.md's state tables from this run")

const (
	doc  = "queue-semantics.md"
	name = "report"
	base = "fairlock:f:{report}"
)

// story replays the walkthrough: each step acts, then the state Redis holds
// is rendered as the document shows it.
type story struct {
	t      *testing.T
	mr     *miniredis.Miniredis
	clk    *clock.Fake
	probe  *redis.Client
	owners map[string]string // hold id -> label
	states map[string]string // step -> rendered state
	order  []string
}

func TestQueueSemanticsDocumentMatchesRedis(t *testing.T) {
	redistest.NoLeaks(t)
	mr, clk, _ := redistest.Mini(t)
	s := &story{t: t, mr: mr, clk: clk, owners: map[string]string{}, states: map[string]string{}}
	s.probe = redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = s.probe.Close() })
	ctx := context.Background()

	type handle struct {
		m      *fair.Mutex
		client *redis.Client
		cancel context.CancelFunc
		done   chan error
	}
	open := func(label string) *handle {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		m, err := fair.New(redistest.OwnerOn(c, clk, nil), name, fair.WithLabel(label))
		if err != nil {
			t.Fatal(err)
		}
		return &handle{m: m, client: c}
	}
	join := func(h *handle, queued int) {
		ctx, cancel := context.WithCancel(ctx)
		h.cancel, h.done = cancel, make(chan error, 1)
		go func() { h.done <- h.m.Lock(ctx) }()
		s.waitFor(func() bool { return len(s.inspect().Queue) == queued && redistest.Asleep() == queued })
	}

	a, b, c, d := open("A"), open("B"), open("C"), open("D")
	if err := a.m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	s.learn()
	s.capture("1-a-holds")

	clk.Advance(time.Second)
	join(b, 1)
	s.learn()
	s.capture("2-b-joins")

	clk.Advance(time.Second)
	join(c, 2)
	clk.Advance(time.Second)
	join(d, 3)
	s.learn()
	s.capture("3-c-and-d-join")

	clk.Advance(time.Second)
	c.cancel()
	if err := <-c.done; err == nil {
		t.Fatal("C got the lock instead of giving up")
	}
	s.waitFor(func() bool { return redistest.Asleep() == 2 })
	s.capture("4-c-gives-up")

	clk.Advance(time.Second)
	_ = b.client.Close() // B's machine dies: no more heartbeats
	s.capture("5-b-crashes")

	// A keeps the lock for a long time; its watchdog renews the lease, and D's
	// heartbeats keep D's place. B's deadline passes at t+14.333s; D's client
	// beats at t+16.333s.
	for clk.Now().Before(redistest.Epoch.Add(14500 * time.Millisecond)) {
		clk.Advance(100 * time.Millisecond)
	}
	s.capture("6-b-deadline-passed")
	for clk.Now().Before(redistest.Epoch.Add(16500 * time.Millisecond)) {
		clk.Advance(100 * time.Millisecond)
	}
	s.capture("7-heartbeat-cleans-up")
	for clk.Now().Before(redistest.Epoch.Add(60 * time.Second)) {
		clk.Advance(100 * time.Millisecond)
	}
	s.capture("8-long-hold")

	if err := a.m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-d.done; err != nil {
		t.Fatalf("D: %v", err)
	}
	s.capture("9-hand-off-to-d")
	clk.Advance(5 * time.Second) // D's claim, halfway through its first lease
	s.capture("10-d-claims")

	if err := d.m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	s.capture("11-d-releases")
	clk.Advance(71 * time.Second) // past k: D's claimed lease (t+90s) plus 40 s
	s.capture("12-nothing-left")
	b.cancel()
	<-b.done

	s.compare()
}

func (s *story) inspect() fair.State {
	st, err := fair.Inspect(context.Background(), s.probe, name)
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

func (s *story) waitFor(cond func() bool) {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatal("the story did not reach its next step")
		}
		time.Sleep(time.Millisecond)
	}
}

// learn maps the hold ids Redis shows to the handles' labels.
func (s *story) learn() {
	st := s.inspect()
	if h := st.Holder; h != nil {
		s.owners[h.Owner] = h.Label
	}
	for _, w := range st.Queue {
		s.owners[w.Owner] = w.Label
	}
}

var idPattern = regexp.MustCompile(`[A-Za-z0-9_-]{22}\.[0-9a-z]+(/[0-9a-z]+)?`)

// friendly replaces hold ids with labels, and entry ids with "label/1"
// (each handle joins once in the story).
func (s *story) friendly(v string) string {
	entries := map[string]string{}
	return idPattern.ReplaceAllStringFunc(v, func(id string) string {
		owner, _, isEntry := strings.Cut(id, "/")
		label := s.owners[owner]
		if label == "" {
			label = "?"
		}
		if !isEntry {
			return label
		}
		if e, ok := entries[id]; ok {
			return e
		}
		e := label + "/1"
		entries[id] = e
		return e
	})
}

// at renders a Redis-time in ms as an offset from the story's start.
func at(ms string) string {
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return ms
	}
	d := time.Duration(n-redistest.Epoch.UnixMilli()) * time.Millisecond
	return fmt.Sprintf("t+%gs", d.Seconds())
}

func (s *story) capture(step string) {
	mr := s.mr
	now := s.clk.Now().Sub(redistest.Epoch)
	var b strings.Builder
	fmt.Fprintf(&b, "Redis time t+%gs\n\n", now.Seconds())
	b.WriteString("| key | type | contents | TTL |\n|---|---|---|---|\n")
	ttl := func(k string) string {
		if d := mr.TTL(k); d > 0 {
			return fmt.Sprintf("%gs", d.Round(time.Millisecond).Seconds())
		}
		return "none"
	}
	keys := redistest.LockKeys(mr)
	if len(keys) == 0 {
		b.WriteString("| (no keys) | | | |\n")
	}
	for _, k := range keys {
		var contents string
		switch k {
		case base:
			hold := redistest.Hold(s.t, mr, k)
			fields := make([]string, 0, len(hold))
			for f := range hold {
				fields = append(fields, f)
			}
			sort.Strings(fields)
			var parts []string
			for _, f := range fields {
				v := hold[f]
				switch f {
				case "x", "g", "h", "k":
					v = at(v)
				case "b":
					v = strings.ReplaceAll(v, "\t", " ")
					v = "`" + v + "`"
				case "q": // "<owner>#<counter>": the counter varies from run to run
					owner, _, _ := strings.Cut(v, "#")
					v = owner + "#n"
				}
				parts = append(parts, f+"="+s.friendly(v))
			}
			contents = strings.Join(parts, ", ")
		case base + ":queue":
			l, _ := mr.List(k)
			var parts []string
			for _, element := range l {
				entry, info, _ := strings.Cut(element, "|")
				info = strings.ReplaceAll(strings.ReplaceAll(info, "\t", " "), "|", "\\|")
				parts = append(parts, s.friendly(entry)+" `"+info+"`")
			}
			contents = strings.Join(parts, ", ")
		case base + ":deadlines":
			members, _ := mr.ZMembers(k)
			var parts []string
			for _, m := range members {
				sc, _ := mr.ZScore(k, m)
				parts = append(parts, s.friendly(m)+" → "+at(strconv.FormatInt(int64(sc), 10)))
			}
			contents = strings.Join(parts, ", ")
		}
		t := mr.Type(k)
		if k == base {
			t = "string, JSON"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k, t, contents, ttl(k))
	}
	s.states[step] = b.String()
	s.order = append(s.order, step)
}

var block = regexp.MustCompile(`(?s)<!-- state ([a-z0-9-]+) -->\n(.*?)<!-- end -->`)

// compare checks every state block of the document against this run, or
// rewrites them with -update.
func (s *story) compare() {
	raw, err := os.ReadFile(doc)
	if err != nil {
		s.t.Fatal(err)
	}
	text := string(raw)
	host, _ := os.Hostname()
	normalise := func(v string) string {
		v = strings.ReplaceAll(v, host+" "+strconv.Itoa(os.Getpid())+" ", "HOST PID ")
		return v
	}
	seen := map[string]bool{}
	out := block.ReplaceAllStringFunc(text, func(m string) string {
		sub := block.FindStringSubmatch(m)
		step, have := sub[1], sub[2]
		seen[step] = true
		want, ok := s.states[step]
		if !ok {
			s.t.Errorf("%s has a state block %q that the story does not produce", doc, step)
			return m
		}
		want = normalise(want)
		if have != want && !*update {
			s.t.Errorf("%s, step %s, drifted from what Redis holds.\ndocument:\n%s\nRedis:\n%s\n(run go test ./docs -update to rewrite it)", doc, step, have, want)
		}
		return "<!-- state " + step + " -->\n" + want + "<!-- end -->"
	})
	for _, step := range s.order {
		if !seen[step] {
			s.t.Errorf("%s lacks the state block of step %s", doc, step)
		}
	}
	if *update {
		if err := os.WriteFile(doc, []byte(out), 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
}
