package testdb

// RunDirOf is the run directory of the run owned by pid.
func RunDirOf(pid int) (string, error) {
	start, err := startTime(pid)
	return owner{pid: pid, start: start}.runDir(), err
}
