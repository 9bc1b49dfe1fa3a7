package httpapi

import "github.com/fibe-dev/billing/internal/web/operatorpage"

// mountOperatorPage serves the payment timeline (package operatorpage) at
// operatorpage.Path, beside the River UI and behind the same credentials
// and cross-site guard (it only reads, so the guard refuses every
// cross-site request that is not a GET, and the page answers 405 to the
// rest). The realm is the River UI's, so a browser signed in to one is
// signed in to the other.
func (s *Server) mountOperatorPage() {
	page := operatorpage.Handler(operatorpage.Options{DB: s.opts.Pool, Logger: s.opts.Logger, RiverUI: "/riverui",
		Providers: s.opts.Providers})
	guarded := BasicAuth(s.opts.RiverUIUser, s.opts.RiverUIPassword, "River UI", riverUIGuard(page))
	s.mux.Handle(operatorpage.Path, guarded)
	s.mux.Handle(operatorpage.Path[:len(operatorpage.Path)-1], guarded)
}
