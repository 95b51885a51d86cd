package rate

import (
	"errors"
	"time"

	"github.com/writeonce/porch-go/porch"
)

// forgetPerHit bounds how many closed windows one hit lets go of, so eviction
// costs a constant per request.
const forgetPerHit = 4

// forgetPerTick bounds how many closed windows one timer-driven forget job
// lets go of before it yields the actor to requests again.
const forgetPerTick = 4096

// armForget runs on v's actor: unless armed already, it sets v's timer to
// send the actor a forget job when v's oldest window closes. Hits let go of
// a few closed windows each; the timer is for an actor that gets no more
// hits, whose keys would otherwise stay in memory for good.
func (l *Limiter) armForget(v *view, now time.Time) {
	end, ok := v.oldest(l.window)
	if v.armed || !ok {
		return
	}
	v.armed = true
	wait := end.Sub(now) + time.Millisecond
	if v.timer != nil {
		v.timer.Reset(wait)
		return
	}
	v.timer = time.AfterFunc(wait, func() { l.forgetTick(v) })
}

// forgetTick runs on v's timer: it hands v's actor a forget job, and tries
// again in a second while the mailbox is full (hits are forgetting
// meanwhile). After Close the pool refuses, and the ticking stops.
func (l *Limiter) forgetTick(v *view) {
	err := l.pool.SendShard(v.shard, false, func(int) {
		now := l.exclusive.Now()
		v.forget(now, l.window, forgetPerTick)
		v.armed = false
		l.armForget(v, now)
	})
	if errors.Is(err, porch.ErrSaturated) {
		time.AfterFunc(time.Second, func() { l.forgetTick(v) })
	}
}
