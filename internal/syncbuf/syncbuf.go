// Package syncbuf is a bytes.Buffer that several goroutines may write and
// read at once: what tests hand to a process or a logger as its output and
// read while it runs.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent use; the zero value is empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
