package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// envURL names the environment variable that gives the Redis URL when no
// flag names a deployment.
const envURL = "FAIRLOCK_REDIS_URL"

// target is where a command finds Redis: one server (-redis), a Redis
// Cluster (-cluster, any of its nodes), or a master behind Sentinel
// (-sentinel, its sentinels, with -master naming it). Each flag takes
// addresses (host:port[,host:port...]) or a URL, which can also carry a
// user, a password, a database number and TLS (rediss://): go-redis's
// ParseURL, ParseClusterURL and ParseFailoverURL read them.
type target struct {
	redis, cluster, sentinel, master string

	// Set by given: the options each client is made from.
	single   *redis.Options
	clusterO *redis.ClusterOptions
	failover *redis.FailoverOptions
}

func (t *target) register(fs *flag.FlagSet) {
	fs.StringVar(&t.redis, "redis", "", "one Redis server: host:port, or a URL redis://[user:password@]host:port[/db] (rediss:// for TLS); default $"+envURL)
	fs.StringVar(&t.cluster, "cluster", "", "Redis Cluster nodes: host:port[,host:port...] (one is enough), or a URL redis://[user:password@]host:port[?addr=host:port...]")
	fs.StringVar(&t.sentinel, "sentinel", "", "Sentinel addresses, host:port[,host:port...], with -master; or a URL redis://[user:password@]host:port?master_name=NAME[&addr=host:port...]")
	fs.StringVar(&t.master, "master", "mymaster", "with -sentinel: the name the sentinels know the master by")
}

func isURL(s string) bool { return strings.Contains(s, "://") }

// given reports whether a deployment was named, by a flag or by
// $FAIRLOCK_REDIS_URL, and parses it; an error if more than one flag
// names one, -master is empty, or a URL is bad.
func (t *target) given() (bool, error) {
	n := 0
	for _, s := range []string{t.redis, t.cluster, t.sentinel} {
		if s != "" {
			n++
		}
	}
	switch {
	case n > 1:
		return false, errors.New("give one of -redis, -cluster and -sentinel")
	case n == 0 && os.Getenv(envURL) != "":
		t.redis = os.Getenv(envURL)
	case n == 0:
		return false, nil
	}
	var err error
	switch {
	case t.cluster != "" && isURL(t.cluster):
		t.clusterO, err = redis.ParseClusterURL(t.cluster)
	case t.cluster != "":
		t.clusterO = &redis.ClusterOptions{Addrs: strings.Split(t.cluster, ",")}
	case t.sentinel != "" && isURL(t.sentinel):
		t.failover, err = redis.ParseFailoverURL(t.sentinel)
		if err == nil && t.failover.MasterName == "" {
			t.failover.MasterName = t.master
		}
	case t.sentinel != "":
		t.failover = &redis.FailoverOptions{MasterName: t.master, SentinelAddrs: strings.Split(t.sentinel, ",")}
	case isURL(t.redis):
		t.single, err = redis.ParseURL(t.redis)
	default:
		t.single = &redis.Options{Addr: t.redis}
	}
	if err != nil {
		return false, fmt.Errorf("bad Redis URL %s: %w", redact(t.first()), err)
	}
	if t.failover != nil && t.failover.MasterName == "" {
		return false, errors.New("-sentinel needs -master, the name of the master")
	}
	return true, nil
}

// require is given for a command that cannot run without Redis (fs's):
// an error, after fs's usage, when no deployment was named.
func (t *target) require(fs *flag.FlagSet) error {
	given, err := t.given()
	if err != nil || given {
		return err
	}
	fs.Usage()
	return fmt.Errorf("%s needs -redis, -cluster, -sentinel or $%s", fs.Name(), envURL)
}

// first is the flag value that names the deployment.
func (t *target) first() string {
	switch {
	case t.cluster != "":
		return t.cluster
	case t.sentinel != "":
		return t.sentinel
	}
	return t.redis
}

// client returns a new client of the deployment (given must have
// reported true).
func (t *target) client() redis.UniversalClient {
	switch {
	case t.clusterO != nil:
		o := *t.clusterO
		return redis.NewClusterClient(&o)
	case t.failover != nil:
		o := *t.failover
		return redis.NewFailoverClient(&o)
	case t.single != nil:
		o := *t.single
		return redis.NewClient(&o)
	}
	return redis.NewClient(&redis.Options{Addr: t.redis}) // the demo's embedded miniredis
}

// flags are the flags that name the deployment, for a command line to
// print; a URL's password is left out.
func (t *target) flags() string {
	switch {
	case t.cluster != "":
		return "-cluster " + redact(t.cluster)
	case t.sentinel != "" && isURL(t.sentinel):
		return "-sentinel " + redact(t.sentinel)
	case t.sentinel != "":
		return fmt.Sprintf("-sentinel %s -master %s", t.sentinel, t.master)
	}
	return "-redis " + redact(t.redis)
}

// String describes the deployment, without a URL's password.
func (t *target) String() string {
	switch {
	case t.cluster != "":
		return "Redis Cluster at " + redact(t.cluster)
	case t.sentinel != "":
		return fmt.Sprintf("master %q behind Sentinel at %s", t.failover.MasterName, redact(t.sentinel))
	}
	return "Redis at " + redact(t.redis)
}

// redact is s with a URL's password replaced by xxxxx.
func redact(s string) string {
	if !isURL(s) {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}
