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
// -redis (one server) or -redis-cluster (seed nodes), at most one of them.
type redisConfig struct {
	url            string
	cluster        []string
	prefix         string
	requireDurable bool
	opt            *goredis.Options // -redis, parsed
}

// enabled reports whether the limiter counts on Redis.
func (c redisConfig) enabled() bool { return c.url != "" || len(c.cluster) > 0 }

// check completes c with -redis-cluster's list and refuses a combination
// that cannot be meant, each with the one line the storefront prints
// before exiting 2.
func (c redisConfig) check(cluster string) (redisConfig, error) {
	if cluster != "" {
		for _, a := range strings.Split(cluster, ",") {
			a = strings.TrimSpace(a)
			if _, _, err := net.SplitHostPort(a); err != nil || a == "" {
				return c, fmt.Errorf("-redis-cluster must be host:port,host:port,…, got %q", cluster)
			}
			c.cluster = append(c.cluster, a)
		}
	}
	switch {
	case c.url != "" && len(c.cluster) > 0:
		return c, errors.New("-redis and -redis-cluster are exclusive: give one server's URL or the cluster's seed nodes")
	case !c.enabled() && c.requireDurable:
		return c, errors.New("-redis-require-durable needs -redis or -redis-cluster")
	case !c.enabled() && c.prefix != "":
		return c, errors.New("-redis-prefix needs -redis or -redis-cluster")
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

// openRedis opens the client -redis or -redis-cluster names and porch's
// Redis store on it. The caller closes the store, then the client (the
// store does not own it). A server that does not answer, or that would
// forget counts under -redis-require-durable, is an error: a start-up
// failure, not a flag error.
func openRedis(ctx context.Context, c redisConfig, opt store.Options) (*redis.Store, goredis.UniversalClient, error) {
	var client goredis.UniversalClient
	if c.opt != nil {
		o := *c.opt
		// A round trip that outlasts the store's Timeout drops its
		// connection instead of waiting out ReadTimeout: a hung server
		// then fails each batch within redis.DefaultTimeout.
		o.ContextTimeoutEnabled = true
		client = goredis.NewClient(&o)
	} else {
		client = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.cluster, ContextTimeoutEnabled: true})
	}
	st, err := redis.Open(ctx, client, redis.Options{Options: opt, Prefix: c.prefix, RequireDurable: c.requireDurable})
	if err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("storefront: -redis: %w", err)
	}
	return st, client, nil
}

// closeClient is the go-redis client's Close as a shutdown step: after the
// store, which flushed its last hits through it.
func closeClient(c goredis.UniversalClient) func(context.Context) error {
	return func(context.Context) error { return c.Close() }
}
