package faults

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process on a loopback port, which a test may stop
// and start again on the same port (empty: no persistence).
type Server struct {
	Addr string
	bin  string
	dir  string
	cmd  *exec.Cmd
}

// StartServer starts redis-server (from PATH) on a free port.
func StartServer() (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	dir, err := os.MkdirTemp("", "fairlock-faults-")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: addr, bin: bin, dir: dir}
	return s, s.Start()
}

// Start starts the server on its port and waits until it answers.
func (s *Server) Start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	s.cmd = exec.Command(s.bin, "--port", port, "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", s.dir)
	if err := s.cmd.Start(); err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer", s.Addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// Stop kills the server: everything it held is gone, as after SHUTDOWN
// NOSAVE.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	s.Stop()
	_ = os.RemoveAll(s.dir)
}

// Shutdown stops the server with SHUTDOWN NOSAVE: it exits at once and
// comes back empty on Start.
func (s *Server) Shutdown() {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	_ = c.Do(context.Background(), "SHUTDOWN", "NOSAVE").Err() // the connection closes: no reply
	_ = c.Close()
	if s.cmd != nil {
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}
