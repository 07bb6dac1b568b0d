// Package config is what the options of every primitive set: the Config a
// handle is made with, its defaults, and the option kinds (Everywhere,
// Waiting, FairOnly, MutexesOnly) that make an option given to a primitive it does
// not apply to a compile error. It knows nothing of holds or waiting.
package config
