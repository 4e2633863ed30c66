package pgcluster

// postmasterPID is the running postmaster's pid, or 0.
func (c *Cluster) postmasterPID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return 0
	}
	return c.proc.cmd.Process.Pid
}

// PostmasterPID exposes postmasterPID to the external test package.
func PostmasterPID(c *Cluster) int { return c.postmasterPID() }

// ChildrenOf exposes childrenOf.
func ChildrenOf(pid int) []int { return childrenOf(pid) }
