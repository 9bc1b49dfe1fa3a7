package httpapi

import (
	"net/http"

	"github.com/fibe-dev/billing/internal/web/operatorpage"
)

// RiverUIHome is where links into the River UI lead (the index, billing
// dev's banner): its queues, with what each holds and runs. The UI's own
// home, its Running jobs, is empty most of the time.
const RiverUIHome = "/riverui/queues"

// index is the answer of GET / and GET /v1: where to go from here, for
// someone who followed billing dev's banner or typed the server's address.
type index struct {
	Name        string   `json:"name"`
	APIDocument string   `json:"api_document"`
	Health      string   `json:"health"`
	RiverUI     string   `json:"river_ui,omitempty"`
	Timeline    string   `json:"timeline,omitempty"`
	Docs        []string `json:"docs"`
}

// indexDocs are the repository's documents a newcomer reads first.
var indexDocs = []string{
	"README.md: setting up, configuration, where to start reading",
	"docs/contract.md: the HTTP rules, the invariants and the idempotency keys",
	"docs/architecture.md: the data flow and where each layer lives",
	"docs/operations.md: the runbook",
}

// index serves GET / and GET /v1, without an API key (like the document
// it points to).
func (s *Server) index(route string) http.Handler {
	body := index{Name: "billing API", APIDocument: "/v1/openapi.json", Health: "/healthz", Docs: indexDocs}
	if s.riverUI != nil { // the operator page is mounted with it
		body.RiverUI, body.Timeline = RiverUIHome, operatorpage.Path
	}
	return instrument(route, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = writeJSON(w, http.StatusOK, body) // a constant body always encodes
	}))
}
