package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/redis"
)

// redisConfig is where the limiter counts when not on the SQL store:
// -redis (one server), -redis-sentinel with -redis-master (a primary its
// Sentinels name) or -redis-cluster (seed nodes), at most one of them.
type redisConfig struct {
	url            string
	sentinels      []string
	master         string
	cluster        []string
	prefix         string
	requireDurable bool
	replicas       int              // redis.Options.Replicas
	opt            *goredis.Options // -redis, parsed
}

// enabled reports whether the limiter counts on Redis.
func (c redisConfig) enabled() bool { return c.url != "" || len(c.sentinels) > 0 || len(c.cluster) > 0 }

// addrList reads flag's host:port,host:port,… list.
func addrList(flag, list string) ([]string, error) {
	if list == "" {
		return nil, nil
	}
	var addrs []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err != nil || a == "" {
			return nil, fmt.Errorf("%s must be host:port,host:port,…, got %q", flag, list)
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// check completes c with -redis-sentinel's and -redis-cluster's lists and
// refuses a combination that cannot be meant, each with the one line the
// storefront prints before exiting 2. replicasSet is whether
// -redis-replicas was given.
func (c redisConfig) check(sentinel, cluster string, replicasSet bool) (redisConfig, error) {
	var err error
	if c.sentinels, err = addrList("-redis-sentinel", sentinel); err != nil {
		return c, err
	}
	if c.cluster, err = addrList("-redis-cluster", cluster); err != nil {
		return c, err
	}
	given := 0
	for _, on := range []bool{c.url != "", len(c.sentinels) > 0, len(c.cluster) > 0} {
		if on {
			given++
		}
	}
	switch {
	case given > 1:
		return c, errors.New("-redis, -redis-sentinel and -redis-cluster are exclusive: give one server's URL, the Sentinels' addresses or the cluster's seed nodes")
	case len(c.sentinels) > 0 && c.master == "":
		return c, errors.New("-redis-sentinel needs -redis-master: the name the Sentinels monitor the primary under")
	case len(c.sentinels) == 0 && c.master != "":
		return c, errors.New("-redis-master needs -redis-sentinel")
	case c.replicas < 0:
		return c, fmt.Errorf("-redis-replicas must not be negative, got %d", c.replicas)
	case !c.enabled() && replicasSet:
		// Even -redis-replicas 0: replicas asked of no Redis is a mistake
		// in the command line.
		return c, errors.New("-redis-replicas needs -redis, -redis-sentinel or -redis-cluster")
	case !c.enabled() && c.requireDurable:
		return c, errors.New("-redis-require-durable needs -redis, -redis-sentinel or -redis-cluster")
	case !c.enabled() && c.prefix != "":
		return c, errors.New("-redis-prefix needs -redis, -redis-sentinel or -redis-cluster")
	case strings.ContainsAny(c.prefix, "{}"):
		return c, fmt.Errorf("-redis-prefix must not contain '{' or '}', got %q", c.prefix)
	}
	if c.url != "" {
		opt, err := goredis.ParseURL(c.url)
		if err != nil {
			return c, fmt.Errorf("-redis must be a redis:// or rediss:// URL, got %q: %v", c.url, err)
		}
		c.opt = opt
	}
	return c, nil
}

// openRedis opens the client -redis, -redis-sentinel or -redis-cluster
// names and porch's Redis store on it. The caller closes the store, then
// the client (the store does not own it). A server that does not answer,
// or that would forget counts under -redis-require-durable, is an error: a
// start-up failure, not a flag error. A primary with fewer replicas online
// than -redis-replicas (still in their first sync, as when everything
// starts together) is not: the shop serves, answering rate-limited
// requests 503 and /healthz 503 until they are online.
func openRedis(ctx context.Context, c redisConfig, opt store.Options) (*redis.Store, goredis.UniversalClient, error) {
	// Each client drops a connection whose round trip outlasts the store's
	// Timeout instead of waiting out ReadTimeout: a hung server then fails
	// each batch within redis.Options.Timeout (left at its default, 250 ms).
	var client goredis.UniversalClient
	switch {
	case c.opt != nil:
		o := *c.opt
		o.ContextTimeoutEnabled = true
		client = goredis.NewClient(&o)
	case len(c.sentinels) > 0:
		client = goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: c.master, SentinelAddrs: c.sentinels,
			ContextTimeoutEnabled: true})
	default:
		client = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.cluster, ContextTimeoutEnabled: true})
	}
	st, err := redis.Open(ctx, client, redis.Options{Options: opt, Prefix: c.prefix, RequireDurable: c.requireDurable,
		Replicas: c.replicas})
	if err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("storefront: redis: %w", err)
	}
	return st, client, nil
}

// closeClient is the go-redis client's Close as a shutdown step: after the
// store, which flushed its last hits through it.
func closeClient(c goredis.UniversalClient) func(context.Context) error {
	return func(context.Context) error { return c.Close() }
}
