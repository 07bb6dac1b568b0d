package observe

import "sync"

// QueueLengths follows the fair queues this process has waiters in, from
// an observer's events, for a gauge of their length: an Observer passes it
// every QueueEvent (Queue) and every Acquisition (Acquisition), and reads
// it when the gauge is collected (Each). The zero value is ready to use,
// and it is safe for concurrent use.
type QueueLengths struct {
	mu     sync.Mutex
	queues map[queueKey]*queueState
}

type queueKey struct {
	p    Primitive
	lock string
}

type queueState struct {
	waiters int // this process's waiters in the queue
	length  int // the latest length Redis told
}

// Queue takes in a waiter's news.
func (q *QueueLengths) Queue(e QueueEvent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queues == nil {
		q.queues = map[queueKey]*queueState{}
	}
	k := queueKey{e.Primitive, e.Lock}
	s := q.queues[k]
	if s == nil {
		s = &queueState{}
		q.queues[k] = s
	}
	switch e.Kind {
	case Joined:
		s.waiters++
	case Evicted:
		return // the same wait goes on: it re-joins
	}
	if e.Length > 0 {
		s.length = e.Length
	}
}

// Acquisition takes in the end of an acquisition: one that queued has left
// its queue.
func (q *QueueLengths) Acquisition(a Acquisition) {
	if !a.Queued {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	k := queueKey{a.Primitive, a.Lock}
	if s := q.queues[k]; s != nil {
		s.waiters--
		if s.waiters <= 0 {
			delete(q.queues, k)
		}
	}
}

// Each calls f with the latest known length of every queue this process
// has a waiter in. f must not call q.
func (q *QueueLengths) Each(f func(p Primitive, lock string, length int)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k, s := range q.queues {
		if s.waiters > 0 {
			f(k.p, k.lock, s.length)
		}
	}
}
