package httpapi

// mountRoutes mounts the /v1 API and the webhook intake.
func (s *Server) mountRoutes() error {
	return nil
}
