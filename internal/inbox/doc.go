// Package inbox is how a waiting call is woken: an owner's pub/sub
// connections (Hubs: one hub per Redis node, each reading the inboxes of
// the locks its waiters wait for, and waking the one waiter a note names),
// a waiter's subscription (Sub), and the Sleeper it sleeps on, which also
// takes its timers and its primitive's news. It knows nothing of locks,
// holds or options: the primitives tell it which channel to listen on and
// read what the notes mean themselves (internal/wire).
package inbox
