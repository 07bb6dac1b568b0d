// Package hung gives tests a server that hangs rather than refuses: it
// accepts connections, reads what they send and never answers, as a Redis
// behind a partition TCP does not notice. It imports nothing of
// fairlock's, so that any package's tests, internal ones included, can
// use it.
package hung

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Server returns the address of a server that never answers, closed with
// its connections when t ends.
func Server(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}
