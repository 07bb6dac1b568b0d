package waiting

import (
	"context"
	"log/slog"

	"github.com/fairlock/fairlock/observe"
)

// Delivered tells whether the message of news the waiter learned elsewhere
// reached it after all: once the hub has read all published before
// (Sub.Flush, bounded by MaxPause and by ctx), it returns the wake-up
// waiting, if any. Unless mine says that is the message, the news was a
// rescue (reported). The caller may be about to return a grant: the look
// ends with ctx, so that a Lock never returns after its deadline for it,
// and a look that ctx cut short reports nothing.
func (l *Loop) Delivered(ctx context.Context, news string, mine func(string) bool) (payload string, found bool) {
	sub := l.sub
	fctx, cancel := context.WithTimeout(ctx, MaxPause)
	err := sub.Flush(fctx)
	cancel()
	if err == nil {
		payload, found = sub.Take()
	} else if ctx.Err() != nil {
		return "", false // not known: the waiter's own end came first
	}
	if !found || !mine(payload) {
		l.rescued(news)
	}
	return payload, found
}

// rescued reports a rescue: the waiter learned news (what it learned) by
// another way than its message.
func (l *Loop) rescued(news string) {
	h, a := l.agent, l.a
	h.QueueNews(a, observe.Rescued, 0)
	if l := h.Config.Logger; l != nil {
		l.Warn("fairlock: a waiter learned of its turn from its fallback, not from its message (a message was lost)",
			slog.String("lock", h.Name), slog.String("owner", h.ID), slog.String("news", news))
	}
}
