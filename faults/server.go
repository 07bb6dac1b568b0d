package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process on a loopback port, which a test may stop
// and start again on the same port (empty: no persistence).
type Server struct {
	Addr string
	// Args are more arguments for redis-server, given at every Start: an
	// ACL user that a restart keeps ("--user", "name on >pw ..."), say.
	Args []string
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
	addr, err := restartablePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fairlock-faults-")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: addr, bin: bin, dir: dir}
	return s, s.Start()
}

// restartablePort returns a free loopback address whose port is below the
// kernel's range of ephemeral ports. While a server is down, clients keep
// dialing its port; one in that range may be given to a client as its own
// local port, and a dial then connects to itself (TCP's simultaneous
// open), holding the port the server is to start on again.
func restartablePort() (string, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var lo, hi int
		if _, err := fmt.Sscan(string(b), &lo, &hi); err == nil && lo > 2048 {
			low = lo
		}
	}
	for range 1000 {
		addr := fmt.Sprintf("127.0.0.1:%d", 1024+rand.IntN(low-1024))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = l.Close()
		return addr, nil
	}
	return "", fmt.Errorf("no free port below %d", low)
}

// Start starts the server on its port and waits until it answers.
func (s *Server) Start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", s.dir}, s.Args...)
	s.cmd = exec.Command(s.bin, args...)
	logPath := filepath.Join(s.dir, "log")
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer func() { _ = log.Close() }()
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("redis-server on %s did not answer; its log:\n%s", s.Addr, out)
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

// Pause stops the server's process (SIGSTOP): its connections stay open
// and nothing answers, as on a server that hangs. Resume continues it.
func (s *Server) Pause() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
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
