package waiting

import (
	"context"
	"log/slog"

	"github.com/fairlock/fairlock/observe"
)

// A rescue is a waiter learning of its turn (a grant made to it, or that it
// became the head of a fair queue) by another way than the message that
// was published for it: its heartbeat's news, or a try that a fallback
// timer made. Grants the heartbeat makes itself and a lease's end are the
// fallbacks' own work, not rescues. Without faults (no message dropped, no
// connection cut, no pause) there are none: a rescue means a message was
// lost, and that the waiter waited for a fallback (up to a heartbeat, a
// third of its wait timeout) instead. Each is reported to the observer
// (observe.Rescued) and logged.

// Delivered tells whether the message of news the waiter learned elsewhere
// reached it after all, only later: it waits (bounded by MaxPause, as a
// try in an outage is, and not cut short by ctx) until the hub of its
// subscription has read everything published before the call (Sub.Flush),
// then takes the wake-up waiting for the waiter, if any, and returns it
// (found). Redis publishes a
// waiter's message before any reply that reports the news it carries, so
// in a run without faults the message is found. Unless mine says the
// wake-up found is that message, the news was a rescue, and is reported.
// The caller handles a wake-up found either way.
func (w *Loop) Delivered(ctx context.Context, news string, mine func(string) bool) (payload string, found bool) {
	sub := w.sub
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MaxPause) // a wait that ends now is no rescue
	err := sub.Flush(fctx)
	cancel()
	if err == nil {
		payload, found = sub.Take()
	}
	if !found || !mine(payload) {
		w.rescued(news)
	}
	return payload, found
}

// rescued reports a rescue: the waiter learned news (what it learned) by
// another way than its message.
func (w *Loop) rescued(news string) {
	h, a := w.h, w.a
	h.QueueNews(a, observe.Rescued, 0)
	if l := h.Config.Logger; l != nil {
		l.Warn("fairlock: a waiter learned of its turn from its fallback, not from its message (a message was lost)",
			slog.String("lock", h.Name), slog.String("owner", h.Owner), slog.String("news", news))
	}
}
