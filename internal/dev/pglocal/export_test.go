package pglocal

// TempLog is the log file of s's start that Stop removes.
func TempLog(s *Server) string { return s.tempLog }
