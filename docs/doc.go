// Package docs holds fairlock's walkthroughs. It has no code: its test
// replays the story of queue-semantics.md against Redis and fails if the
// document's tables drift from what Redis holds.
package docs
