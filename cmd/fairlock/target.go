package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// target is where a command finds Redis: one server (-redis), a Redis
// Cluster (-cluster, any of its nodes), or a master behind Sentinel
// (-sentinel, its sentinels, with -master naming it).
type target struct {
	redis, cluster, sentinel, master string
}

func (t *target) register(fs *flag.FlagSet) {
	fs.StringVar(&t.redis, "redis", "", "Redis address, host:port")
	fs.StringVar(&t.cluster, "cluster", "", "Redis Cluster nodes, host:port[,host:port...] (one is enough)")
	fs.StringVar(&t.sentinel, "sentinel", "", "Sentinel addresses, host:port[,host:port...], with -master")
	fs.StringVar(&t.master, "master", "mymaster", "with -sentinel: the name the sentinels know the master by")
}

// given reports whether a deployment was named; an error if more than one
// was, or -master is empty.
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
	case t.sentinel != "" && t.master == "":
		return false, errors.New("-sentinel needs -master, the name of the master")
	}
	return n == 1, nil
}

// client returns a new client of the deployment.
func (t *target) client() redis.UniversalClient {
	switch {
	case t.cluster != "":
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(t.cluster, ",")})
	case t.sentinel != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: t.master, SentinelAddrs: strings.Split(t.sentinel, ",")})
	}
	return redis.NewClient(&redis.Options{Addr: t.redis})
}

// flags are the flags that name the deployment, for a command line to print.
func (t *target) flags() string {
	switch {
	case t.cluster != "":
		return "-cluster " + t.cluster
	case t.sentinel != "":
		return fmt.Sprintf("-sentinel %s -master %s", t.sentinel, t.master)
	}
	return "-redis " + t.redis
}

// String describes the deployment.
func (t *target) String() string {
	switch {
	case t.cluster != "":
		return "Redis Cluster at " + t.cluster
	case t.sentinel != "":
		return fmt.Sprintf("master %q behind Sentinel at %s", t.master, t.sentinel)
	}
	return "Redis at " + t.redis
}
