package core

import "github.com/fairlock/fairlock/observe"

// Observers is an observe.Observer with its optional capabilities resolved
// once (WithObserver): nil where it has none. A Config without an observer
// has a nil *Observers, and every report is skipped by one nil check.
type Observers struct {
	obs    observe.Observer // nil: this handle reports queue news only (a semaphore's gate)
	renew  observe.RenewalObserver
	queue  observe.QueueObserver
	tracer observe.Tracer
}

// WithObserver sets the observer of every acquisition and hold.
func WithObserver(o observe.Observer) Everywhere {
	return func(c *Config) error {
		if o == nil {
			return Invalid("observer must not be nil")
		}
		obs := &Observers{obs: o}
		obs.renew, _ = o.(observe.RenewalObserver)
		obs.queue, _ = o.(observe.QueueObserver)
		obs.tracer, _ = o.(observe.Tracer)
		c.Observer = obs
		return nil
	}
}

// WithoutObserver drops the observer: the members of a primitive that
// reports as one lock (a RedLock's) report nothing of their own.
func WithoutObserver() Everywhere {
	return func(c *Config) error {
		c.Observer = nil
		return nil
	}
}

// Observer and Tracer return o's observer and tracer, nil if none, for a
// primitive that reports itself (a RedLock).
func (o *Observers) Observer() observe.Observer {
	if o == nil {
		return nil
	}
	return o.obs
}

func (o *Observers) Tracer() observe.Tracer {
	if o == nil {
		return nil
	}
	return o.tracer
}

// QueueOnly is o for a handle whose acquisitions and holds are not the
// user's (a semaphore's gate): only its queue news are reported.
func (o *Observers) QueueOnly() *Observers {
	if o == nil || o.queue == nil {
		return nil
	}
	return &Observers{queue: o.queue}
}

// Renewal and Queue return o's renewal and queue observers, nil if none.
func (o *Observers) Renewal() observe.RenewalObserver {
	if o == nil {
		return nil
	}
	return o.renew
}

func (o *Observers) Queue() observe.QueueObserver {
	if o == nil {
		return nil
	}
	return o.queue
}
