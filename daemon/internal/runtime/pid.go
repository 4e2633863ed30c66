package runtime

// Pid is the process id the Spawner returned for the live instance (the
// jail's launcher, or the server itself when unjailed), or 0 while the
// server is down. The pool measures memory from the process tree under it.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || !s.cur.alive() {
		return 0
	}
	return s.cur.proc.Pid()
}
