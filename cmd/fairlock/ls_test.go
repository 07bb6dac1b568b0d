package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// queueUp starts lock in a goroutine and waits until the semaphore (or RW
// lock) inspect reads shows n waiters; the returned func stops the waiter.
func queueUp(t *testing.T, lock func(ctx context.Context) error, n int, queued func() int) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = lock(ctx)
	}()
	for deadline := time.Now().Add(10 * time.Second); queued() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("the waiter never queued: %d waiting, want %d", queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
	return func() { cancel(); <-done }
}

// inspect finds what kind a name is, says "no such lock" for a name no
// lock has, and shows what each waiter of a semaphore or a read-write lock
// asks for: permits, or read or write.
func TestInspectFindsTheKindAndWhatWaitersAsk(t *testing.T) {
	redistest.NoLeaks(t)
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()

	rw, _ := fair.NewRWMutex(redistest.Owner(client), "catalog", fair.WithLabel("editor"))
	if err := rw.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer rw.Unlock(ctx)
	rwQueue := func() int { st, _ := fair.InspectRWMutex(ctx, client, "catalog"); return len(st.Queue) }
	reader, _ := fair.NewRWMutex(redistest.Owner(client), "catalog", fair.WithLabel("reader"))
	defer queueUp(t, reader.RLock, 1, rwQueue)()
	writer, _ := fair.NewRWMutex(redistest.Owner(client), "catalog", fair.WithLabel("writer"))
	defer queueUp(t, writer.Lock, 2, rwQueue)()

	out, _, err := runCLI(t, "inspect", "-redis", mr.Addr(), "catalog")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`read-write lock "catalog": held by a writer`, "MODE", "ASKS"} {
		if !strings.Contains(out, want) {
			t.Fatalf("inspect output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^1\s+\S+\s+reader\s.*\sread\s`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^2\s+\S+\s+writer\s.*\swrite\s`).MatchString(out) {
		t.Fatalf("the queue does not show a reader asking to read, then a writer asking to write:\n%s", out)
	}
	if strings.Contains(out, "10000") {
		t.Fatalf("a read-write lock shown as permits:\n%s", out)
	}

	s, _ := fair.NewSemaphore(redistest.Owner(client), "encoders", 3)
	p, err := s.Acquire(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	semQueue := func() int { st, _ := fair.InspectSemaphore(ctx, client, "encoders"); return len(st.Queue) }
	defer queueUp(t, func(ctx context.Context) error { _, err := s.Acquire(ctx, 2); return err }, 1, semQueue)()
	out, _, err = runCLI(t, "inspect", "-redis", mr.Addr(), "encoders")
	if err != nil || !regexp.MustCompile(`(?m)^1\s.*\s2 permit\(s\)\s`).MatchString(out) {
		t.Fatalf("inspect of a semaphore whose waiter asks for 2: %v\n%s", err, out)
	}

	r, _ := reentrant.New(redistest.Owner(client), "nightly")
	if err := r.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Unlock(ctx)
	// Its waiters are in Redis, in the order releases wake them.
	r2, _ := reentrant.New(redistest.Owner(client), "nightly")
	waiting := func() int { q, _ := reentrantWaiters(ctx, client, "nightly"); return len(q) }
	defer queueUp(t, r2.Lock, 1, waiting)()
	out, _, err = runCLI(t, "inspect", "-redis", mr.Addr(), "nightly")
	if err != nil || !strings.Contains(out, `reentrant lock "nightly"`) || !strings.Contains(out, "COUNT") ||
		!strings.Contains(out, "woken one per release in this order") || !regexp.MustCompile(`(?m)^1\s+\S+/\S+\s.*waiting`).MatchString(out) {
		t.Fatalf("inspect of a reentrant lock with a waiter: %v\n%s", err, out)
	}

	for _, args := range [][]string{{"catalgo"}, {"-kind", "fair", "encoders"}} {
		_, _, err := runCLI(t, append([]string{"inspect", "-redis", mr.Addr()}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "no such lock") {
			t.Errorf("inspect %v: got %v, want no such lock", args, err)
		}
	}

	// -json, for scripts.
	out, _, err = runCLI(t, "inspect", "-redis", mr.Addr(), "-json", "encoders")
	if err != nil {
		t.Fatal(err)
	}
	var v view
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if v.Kind != kindSemaphore || v.Permits != 3 || v.InUse != 3 || len(v.Holders) != 1 || len(v.Queue) != 1 || v.Queue[0].Permits != 2 {
		t.Fatalf("inspect -json: %+v", v)
	}
}

// inspect -watch refreshes until interrupted, and an interrupt ends it
// without an error.
func TestInspectWatchRefreshesUntilInterrupted(t *testing.T) {
	redistest.NoLeaks(t)
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	m, _ := fair.New(redistest.Owner(client), "reports")
	if err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out redistest.LogBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"inspect", "-redis", mr.Addr(), "-watch", "100ms", "reports"}, &out, &out)
	}()
	for deadline := time.Now().Add(10 * time.Second); strings.Count(out.String(), `fair lock "reports"`) < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("no second refresh:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The lock is released: the next refresh shows it.
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "holder: none (free)"); {
		if time.Now().After(deadline) {
			t.Fatalf("the release never showed:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("inspect -watch interrupted: %v", err)
	}
}

// ls finds the locks of every kind on each of a cluster's 3 masters, and
// -match narrows the list.
func TestLsFindsLocksOnEveryMaster(t *testing.T) {
	redistest.NoLeaks(t)
	client := redistest.Client(t, redistest.Cluster3).(*redis.ClusterClient)
	ctx := context.Background()
	prefix := redistest.Name(t)
	masters := map[string]bool{}
	var names []string
	for i := 0; len(masters) < 3 || i < 6; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		m, err := fair.New(redistest.Owner(client), name, fair.WithLabel("ls"))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		defer m.Unlock(ctx)
		node, err := client.MasterForKey(ctx, "fairlock:f:{"+name+"}")
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
		names = append(names, name)
		if i > 60 {
			t.Fatal("60 names, and not one on each master")
		}
	}
	s, _ := fair.NewSemaphore(redistest.Owner(client), prefix+"-pool", 4)
	p, err := s.Acquire(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	r, _ := reentrant.New(redistest.Owner(client), prefix+"-plain")
	if err := r.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Unlock(ctx)

	addrs := strings.Join(redistest.Addrs(t, redistest.Cluster3), ",")
	out, _, err := runCLI(t, "ls", "-cluster", addrs, "-match", prefix+"-*")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if !regexp.MustCompile(`(?m)^fair\s+` + regexp.QuoteMeta(name) + `\s+ls \(`).MatchString(out) {
			t.Errorf("ls does not list the fair lock %s held by ls:\n%s", name, out)
		}
	}
	if !regexp.MustCompile(`(?m)^semaphore\s+`+regexp.QuoteMeta(prefix)+`-pool\s+3 of 4 permits\s+0\s`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^reentrant\s+`+regexp.QuoteMeta(prefix)+`-plain\s`).MatchString(out) {
		t.Errorf("ls does not list the semaphore and the reentrant lock:\n%s", out)
	}
	out, _, err = runCLI(t, "ls", "-cluster", addrs, "-match", prefix+"-pool", "-json")
	if err != nil {
		t.Fatal(err)
	}
	var v view
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Name != prefix+"-pool" || v.InUse != 3 {
		t.Fatalf("ls -json -match: %v, %+v\n%s", err, v, out)
	}
}

// A URL gives the password and the database; $FAIRLOCK_REDIS_URL stands in
// for the flags; a password is never printed.
func TestURLsGiveThePasswordAndTheDatabase(t *testing.T) {
	redistest.NoLeaks(t)
	mr := miniredis.RunT(t)
	mr.RequireAuth("s3cret")
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), Password: "s3cret", DB: 2})
	defer client.Close()
	m, _ := fair.New(redistest.Owner(client), "backups", fair.WithLabel("db2"))
	if err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(context.Background())

	url := "redis://:s3cret@" + mr.Addr() + "/2"
	out, _, err := runCLI(t, "inspect", "-redis", url, "backups")
	if err != nil || !strings.Contains(out, "db2") {
		t.Fatalf("inspect -redis %s: %v\n%s", url, err, out)
	}
	if _, _, err := runCLI(t, "inspect", "-redis", "redis://"+mr.Addr()+"/2", "backups"); err == nil {
		t.Fatal("no error without the password")
	}
	if _, _, err := runCLI(t, "inspect", "-redis", "redis://:s3cret@"+mr.Addr()+"/0", "backups"); err == nil {
		t.Fatal("found in database 0")
	}
	t.Setenv(envURL, url)
	if out, _, err := runCLI(t, "ls"); err != nil || !strings.Contains(out, "backups") {
		t.Fatalf("ls with $%s: %v\n%s", envURL, err, out)
	}
	if _, _, err := runCLI(t, "inspect", "-redis", "redis://h:1/notanumber", "x"); err == nil {
		t.Fatal("a bad URL: no error")
	}
	for _, tg := range []*target{{redis: url}, {cluster: "redis://u:s3cret@h:1"}} {
		if _, err := tg.given(); err != nil {
			t.Fatal(err)
		}
		if s := tg.String() + tg.flags(); strings.Contains(s, "s3cret") {
			t.Errorf("the password is printed: %s", s)
		}
	}
}

// A user without @scripting (ls reads every lock with a script) gets
// Redis's NOPERM, printed after one "fairlock: ".
func TestLsAsAUserWithoutScripting(t *testing.T) {
	admin := redistest.Real(t)
	bg := context.Background()
	name := redistest.Name(t)
	user := "noscripts-" + name
	if err := admin.Do(bg, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-@scripting").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(bg, "ACL", "DELUSER", user).Err() })
	m, err := fair.NewElection(redistest.Owner(admin), name)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := m.Campaign(bg, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Resign(lead) }()
	url := "redis://" + user + ":pw@" + admin.Options().Addr
	_, _, err = runCLI(t, "ls", "-redis", url, "-match", name)
	if err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("ls as a user without scripting: %v, want NOPERM", err)
	}
	if line := errorLine(err); strings.Count(line, "fairlock: ") != 1 {
		t.Errorf("ls prints %q: want one \"fairlock: \"", line)
	}
}

// selfSigned returns a TLS certificate for 127.0.0.1, signed by itself.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "fairlock test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// rediss:// reaches a server that speaks TLS only; redis:// does not.
func TestRedissURLSpeaksTLS(t *testing.T) {
	redistest.NoLeaks(t)
	mr := miniredis.NewMiniRedis()
	if err := mr.StartTLS(&tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}); err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), TLSConfig: &tls.Config{InsecureSkipVerify: true}})
	defer client.Close()
	m, _ := fair.New(redistest.Owner(client), "secure", fair.WithLabel("over tls"))
	if err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(context.Background())

	// The test's certificate is its own: skip_verify, as go-redis's URLs
	// allow; a real deployment's is verified.
	out, _, err := runCLI(t, "inspect", "-redis", "rediss://"+mr.Addr()+"?skip_verify=true", "secure")
	if err != nil || !strings.Contains(out, "over tls") {
		t.Fatalf("inspect over rediss://: %v\n%s", err, out)
	}
	if _, _, err := runCLI(t, "inspect", "-redis", "rediss://"+mr.Addr(), "secure"); err == nil {
		t.Fatal("an unverifiable certificate was accepted without skip_verify")
	}
	if _, _, err := runCLI(t, "inspect", "-redis", "redis://"+mr.Addr(), "secure"); err == nil {
		t.Fatal("plain redis:// reached a TLS-only server")
	}
}

// ls and inspect show an election: its leader, term and value, and its
// candidates in the order they will lead, with their values.
func TestLsAndInspectShowElections(t *testing.T) {
	redistest.NoLeaks(t)
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()

	leader, _ := fair.NewElection(redistest.Owner(client), "scheduler", fair.WithLabel("host-a"))
	lead, err := leader.Campaign(ctx, "host-a:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Resign(lead)
	term := leader.Term(lead)
	candidates := func() int { st, _ := fair.InspectElection(ctx, client, "scheduler"); return len(st.Candidates) }
	b, _ := fair.NewElection(redistest.Owner(client), "scheduler", fair.WithLabel("host-b"))
	defer queueUp(t, func(ctx context.Context) error { _, err := b.Campaign(ctx, "host-b:8080"); return err }, 1, candidates)()

	out, _, err := runCLI(t, "inspect", "-redis", mr.Addr(), "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`election "scheduler"`, "LEADER", "TERM", `"host-a:8080"`, fmt.Sprint(term),
		"candidates, in the order they will lead:", "VALUE"} {
		if !strings.Contains(out, want) {
			t.Fatalf("inspect output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^1\s+\S+\s+host-b\s.*"host-b:8080"`).MatchString(out) {
		t.Fatalf("the candidates do not show host-b with its value:\n%s", out)
	}
	out, _, err = runCLI(t, "ls", "-redis", mr.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^election\s+scheduler\s+leader host-a .*term \d+: host-a:8080\s+1\s`).MatchString(out) {
		t.Fatalf("ls does not show the election's leader and candidate:\n%s", out)
	}
	out, _, err = runCLI(t, "inspect", "-redis", mr.Addr(), "-json", "-kind", "election", "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	var v view
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Kind != "election" || len(v.Holders) != 1 || v.Holders[0].Value != "host-a:8080" || v.Holders[0].Token != term ||
		len(v.Queue) != 1 || v.Queue[0].Value != "host-b:8080" {
		t.Fatalf("inspect -json: %+v", v)
	}
}

// A lock ls cannot read (one written by a version of another data layout,
// during an upgrade) is listed with its error beside the others, and ls
// fails; a label's control characters are shown quoted, not written to the
// terminal.
func TestLsListsWhatItCanReadBesideALockOfAnotherLayout(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	if err := mr.Set("fairlock:f:{old}", `{"v":"7","f":"5","k":"9999999999999","r":""}`); err != nil {
		t.Fatal(err)
	}
	m, err := fair.New(redistest.Owner(client), "new", fair.WithLabel("two\nlines"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(ctx)
	out, _, err := runCLI(t, "ls", "-redis", "redis://"+mr.Addr())
	if err == nil || !strings.Contains(err.Error(), "data layout 7") {
		t.Errorf("ls beside a layout-7 lock: %v, want its layout error", err)
	}
	if !regexp.MustCompile(`(?m)^fair\s+new\s+"two\\nlines" \(`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^fair\s+old\s+unreadable: .*data layout 7`).MatchString(out) {
		t.Errorf("ls does not list both locks, the label quoted:\n%s", out)
	}
}
