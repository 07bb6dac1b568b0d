// Package faults proves fairlock under real faults: worker OS processes
// killed with SIGKILL, connections cut or held by a TCP proxy, and a
// redis-server stalled or restarted. Its tests start their own servers
// (redis-server on PATH) and re-execute the test binary as workers; run them
// with `cd faults && go test -race ./...`. docs/reliability.md reports the
// figures they measure.
//
// The module is separate so that none of this enters the library's
// dependency graph.
package faults

import (
	"bytes"
	"math/rand/v2"
	"net"
	"sync"
)

// Proxy is a TCP proxy between clients and one Redis server, which can hold
// or cut the traffic. It is small on purpose: toxiproxy's toxics add latency
// and bandwidth limits, but cutting a connection right after a chosen request
// reached Redis (an ambiguous outcome) needs a look at the request bytes,
// which its toxics do not take.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	conns    map[*link]struct{}
	held     bool          // Hold: nothing is forwarded
	resume   chan struct{} // closed by Release
	refuse   bool          // new connections are closed at once
	dropOn   []byte        // DropReplyTo: the request bytes to look for
	dropHold bool          // and Hold once the reply is dropped
	dropped  chan struct{} // closed when a reply was dropped
	closed   bool
	wg       sync.WaitGroup
}

type link struct {
	client, server net.Conn
	drop           bool // the next reply is dropped and the link cut
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*link]struct{}{}, resume: make(chan struct{})}
	close(p.resume)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse || p.closed
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		p.conns[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(l, c, s, true)
		go p.pipe(l, s, c, false)
	}
}

// pipe copies one direction of a link until either side closes.
func (p *Proxy) pipe(l *link, from, to net.Conn, request bool) {
	defer p.wg.Done()
	defer p.cut(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			resume := p.resume
			p.mu.Unlock()
			<-resume // Hold: keep the bytes until Release (or the link is cut)
			p.mu.Lock()
			drop := false
			if request && p.dropOn != nil && bytes.Contains(buf[:n], p.dropOn) {
				l.drop, p.dropOn = true, nil
			} else if !request && l.drop {
				drop = true
			}
			dropped, hold := p.dropped, p.dropHold
			p.mu.Unlock()
			if drop {
				// The request ran; its reply never arrives. With hold, the
				// client's retry waits in the proxy until Release.
				if hold {
					p.Hold()
				}
				p.cut(l)
				if dropped != nil {
					close(dropped)
				}
				return
			}
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or the link was cut
		}
	}
}

func (p *Proxy) cut(l *link) {
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
	_ = l.client.Close()
	_ = l.server.Close()
}

// Hold stops forwarding in both directions, keeping every connection open:
// a partition that TCP does not notice. New connections are accepted and
// held too.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.held {
		p.held = true
		p.resume = make(chan struct{})
	}
}

// Release forwards again what Hold kept, and everything after it.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held {
		p.held = false
		close(p.resume)
	}
}

// Cut closes every current connection; new ones are refused while refuse is
// true (a server that went away), and accepted again after Cut(false).
func (p *Proxy) Cut(refuse bool) {
	p.mu.Lock()
	p.refuse = refuse
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		p.cut(l)
	}
}

// CutOne closes one current connection, chosen at random; it reports
// whether there was one.
func (p *Proxy) CutOne() bool {
	p.mu.Lock()
	var victim *link
	n := 0
	for l := range p.conns {
		n++
		if rand.IntN(n) == 0 { // reservoir sampling: each link equally likely
			victim = l
		}
	}
	p.mu.Unlock()
	if victim == nil {
		return false
	}
	p.cut(victim)
	return true
}

// DropReplyTo arms the proxy: the next request whose bytes contain match
// reaches Redis, and the reply on its connection is dropped and the
// connection cut, so the client cannot know whether it ran. The channel is
// closed once that happened.
func (p *Proxy) DropReplyTo(match string) <-chan struct{} { return p.dropReply(match, false) }

// DropReplyAndHold is DropReplyTo, and then Hold: the client's retry of the
// request waits in the proxy until Release, so that a test can act between
// the request's first run and its retry.
func (p *Proxy) DropReplyAndHold(match string) <-chan struct{} { return p.dropReply(match, true) }

func (p *Proxy) dropReply(match string, hold bool) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropOn, p.dropHold = []byte(match), hold
	p.dropped = make(chan struct{})
	return p.dropped
}

// Close stops the proxy and cuts every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Release()
	p.Cut(true)
	p.wg.Wait()
}
