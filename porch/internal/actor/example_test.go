package actor_test

import (
	"context"
	"fmt"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
)

func ExampleReply() {
	p := actor.Of(porch.NewPool(porch.PoolOptions{Size: 4}))
	defer p.Close(context.Background())

	// counts[shard] is touched only by that shard's actor: no lock.
	counts := make([]map[string]int, p.Size())
	for i := range counts {
		counts[i] = make(map[string]int)
	}
	hit := func(key string) int {
		reply := actor.NewReply[int]()
		err := p.Send(key, func(shard int) {
			counts[shard][key]++
			reply.Send(counts[shard][key], nil)
		})
		if err != nil {
			panic(err) // ErrSaturated: a server answers 503
		}
		n, err := reply.Wait(context.Background())
		if err != nil {
			panic(err)
		}
		return n
	}
	fmt.Println(hit("alice"), hit("alice"), hit("bob"), hit("alice"))
	// Output: 1 2 1 3
}
